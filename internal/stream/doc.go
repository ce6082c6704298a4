// Package stream is the server side of the WebSocket API at /api/v1/ws:
// live prices of chosen coins and the caller's own alert firings.
//
// The API layer authenticates the upgrade request (Authorization: Bearer
// or X-API-Key) and calls Hub.Serve with the key's Principal, or with nil
// when the request carried no key: the client must then authenticate with
// its first message, which Config.Authenticate checks. The market feed
// calls Hub.PublishPrices on every tick and the alert evaluator calls
// Hub.PublishAlert on every firing.
//
// # Design
//
// The Hub keeps, under one RWMutex, an index from coin id to the
// connections that follow it (a slice per coin; each connection remembers
// its position, so unsubscribing is O(1)) and from owner (user id and
// mode) to the connections subscribed to alerts.
//
// Each connection has a bounded queue of outgoing messages (SendQueue)
// and two goroutines: Serve's, which reads client messages and answers
// them, and a writer, the only one to write to the socket, each write
// bounded by WriteTimeout. The writer also sends the heartbeats and
// numbers the messages as it writes them, so "sequence" is exactly the
// order the client receives them in. Nothing ever blocks on a client:
// messages are queued without waiting, and a connection whose queue is
// full is dropped (status 1008, reason "too slow") while everyone else
// carries on; no lock is held while writing to a socket. Only the
// client's own messages wait: the reader takes the next one once the
// queue is at most half full, so replies alone never fill it.
//
// PublishPrices encodes each update once; then, under the read lock, it
// walks the subscribers of each updated coin to gather every connection's
// list of updates (connections with the same list share one) and queues
// it. Each connection's writer then assembles its message by copying the
// encoded updates, so the publisher's work is proportional to the
// subscriptions touched, not to the bytes sent, and the copying is spread
// over the writers. An alert firing is encoded once and queued to each of
// its owner's connections.
//
// # Protocol
//
// The text below is the API documentation of the protocol.
//
// Connect to wss://HOST/api/v1/ws (premium plans and up) with the key in
// the Authorization: Bearer or X-API-Key header, as for REST. Clients that
// cannot set headers (browsers) connect without one and send the key as
// their first message, within 10 seconds:
//
//	{"type":"auth","api_key":"sk_live_..."}
//
// Every message, both ways, is a JSON object in a text frame. Field names
// are spelled out in full; unknown, misspelled or duplicate fields are
// errors.
//
// Client messages. Each may carry an "id" (a string or a number, at most
// 128 bytes of JSON), echoed in the reply so that replies can be matched
// to requests:
//
//	{"type":"auth","api_key":"sk_live_..."}                              first message only, when no header carried a key
//	{"type":"subscribe","channel":"prices","coins":["bitcoin","eth"]}   ids or symbols, 1..1000 per message, 1..100 characters each
//	{"type":"unsubscribe","channel":"prices","coins":["eth"]}           leave out "coins" to leave every coin
//	{"type":"subscribe","channel":"alerts"}                             your own alert firings (same user, same live/test mode as the key)
//	{"type":"unsubscribe","channel":"alerts"}
//	{"type":"ping","id":7}
//
// A connection may follow up to 1,000 coins (subscriptions add up; repeating
// a coin is harmless). A subscription message is applied entirely or not
// at all: if any coin is unknown, or the total would pass the limit, an
// error comes back and nothing changes. A message may be up to 16 KiB;
// split longer coin lists over several messages.
//
// Server messages. Every one has "type" and "sequence", which counts 1, 2,
// 3… per connection, in the order the messages are sent: a gap never
// happens, since the server drops a connection rather than skip a message.
// Times are ISO 8601 in UTC.
//
//	{"type":"welcome","sequence":1,"mode":"live","heartbeat_interval_seconds":15,"max_subscriptions":1000,"max_message_bytes":16384}
//	    sent once authenticated (at once with a header key; after the auth message, echoing its id, otherwise)
//	{"type":"subscribed","sequence":2,"id":"a","channel":"prices","coins":["bitcoin","ethereum"],"subscription_count":2}
//	    "coins" are the coin ids the message named (symbols resolved, duplicates removed);
//	    "subscription_count" is how many coins the connection now follows
//	{"type":"unsubscribed","sequence":3,"channel":"prices","coins":["ethereum"],"subscription_count":1}
//	{"type":"subscribed","sequence":4,"channel":"alerts"}
//	{"type":"prices","sequence":5,"as_of":"2025-01-01T12:00:00.000Z","snapshot":"m5duhs00-1k2x9qz",
//	 "updates":[{"coin_id":"bitcoin","symbol":"btc","price":97000.5,"price_change_percentage_24h":-1.25,
//	             "market_cap":1920000000000,"total_volume":35000000000,"last_updated":"2025-01-01T12:00:00Z"}]}
//	    one per market refresh, with the followed coins it updated (none: no message);
//	    the figures are those of GET /coins/{id}; price_change_percentage_24h may be null
//	{"type":"alert.triggered","sequence":6,"alert_id":42,"alert":{...}}
//	    "alert" is the alert as GET /alerts/{id} returns it, just after it fired
//	{"type":"heartbeat","sequence":7,"time":"2025-01-01T12:00:15.000Z"}
//	    every heartbeat_interval_seconds: a connection that hears nothing for
//	    several intervals should reconnect
//	{"type":"pong","sequence":8,"id":7,"time":"2025-01-01T12:00:16.000Z"}
//	{"type":"error","sequence":9,"id":"b","code":"RESOURCE_NOT_FOUND","message":"Coin \"nope\" was not found.",
//	 "details":[{"field":"coins[0]","message":"Coin \"nope\" was not found."}]}
//
// Error codes are those of the REST API: VALIDATION_ERROR (malformed JSON,
// wrong types, unknown type, channel or field, a missing or empty field,
// too many coins), RESOURCE_NOT_FOUND (unknown coin), PAYLOAD_TOO_LARGE (a
// message over 16 KiB), INVALID_API_KEY, PERMISSION_DENIED and
// EXPIRED_SUBSCRIPTION (authentication), SERVER_ERROR. "details", when
// present, names the fields at fault.
//
// An invalid message only earns an error: the connection stays open and
// its subscriptions unchanged. The server closes a connection (WebSocket
// close status and reason) when:
//
//   - authentication fails, or the first message of a connection without a
//     header key is not a valid auth message, or it does not come within
//     10 s: an error message, then 1008 "authentication failed",
//     "authentication required" or "authentication timeout" (1011 or 1013
//     when the server could not check the key; 1013 "rate limit exceeded"
//     when the account's limits refuse the call, or it holds all the
//     connections it may keep open: retry later);
//   - it breaks the protocol: 1002 (an unmasked frame, an unknown
//     opcode), or 1007 "invalid UTF-8" for a text message that is not
//     UTF-8;
//   - the client reads too slowly: it falls 256 messages behind: 1008
//     "too slow" (the close frame reaches the client only once it has
//     read what was sent before); or one message takes over 10 s to
//     write: the socket is closed without a close frame, since the
//     message being written cannot be finished;
//   - it sends more than 60 invalid messages within a minute: an error,
//     then 1008 "too many invalid messages" (its messages are also paced,
//     without a close: 20 at once, then 10 a second, the next ones waiting
//     unread; see Config.MessageRate);
//   - a message exceeds 64 KiB: 1009 (message too big), without an error
//     message (between 16 and 64 KiB: a PAYLOAD_TOO_LARGE error only);
//   - its key or account no longer passes (the API calls DisconnectKey):
//     an error saying why, then 1008 with a reason: INVALID_API_KEY and
//     "api key revoked" or "api key expired", EXPIRED_SUBSCRIPTION and
//     "subscription expired", PERMISSION_DENIED and "plan excludes
//     streams";
//   - the server shuts down: 1001 "server shutting down".
//
// Reconnect with backoff after a close; subscriptions do not survive a
// connection. WebSocket ping frames are answered (pong frames) as well as
// ping messages.
package stream
