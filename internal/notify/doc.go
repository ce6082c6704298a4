// Package notify delivers the events of coinpulse's outbox, in two halves.
//
// Webhooks: messages are signed as Standard Webhooks
// (https://www.standardwebhooks.com) with the endpoint's "whsec_" secret
// (NewSecret, Sign, Headers) and posted by a Sender, an HTTP client that
// refuses to connect to loopback, private, link-local, metadata and other
// non-public addresses (checked on the IP actually dialed, after DNS
// resolution; CheckURL runs the same check when an endpoint is
// registered), never follows redirects and never uses a proxy. A failed
// attempt is retried on the schedule of NextAttempt, about 1.3 days in
// all, and Sender.Outcome turns each attempt's Result into the
// coinpulse.Attempt to record, disabling the endpoint when it answers
// 410 Gone or when a delivery's retries run out.
//
// E-mail: alert e-mails are sent through an SMTP server.
package notify
