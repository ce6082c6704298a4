package api

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"coinpulse/internal/market"
)

// Response compression: an answer of gzipMin bytes or more goes out
// gzip-encoded (Content-Encoding: gzip, Vary: Accept-Encoding, the
// Content-Length of the encoded bytes) when the request's Accept-Encoding
// takes gzip (parseAcceptEncoding; every body, whatever its size, when it
// refuses identity); anything else goes out as it is, with no header
// added, so that a request without Accept-Encoding (the benchmarks',
// wrk's) costs a header look-up and nothing more, and the exchange no
// byte. Not compressed: HEAD (its headers are identity's), 304s, 204s,
// answers already encoded (/metrics encodes its own), WebSocket upgrades
// (they write no body through here) and the dashboard's pages (they carry
// the session's CSRF token and, once, a new key beside text the visitor
// typed: compressed, their length would leak the secret, as BREACH
// showed, to whoever can make a signed-in browser send requests and watch
// the sizes; the API authenticates by header, so no page of another site
// can make a browser send it a keyed request).
//
// ETags: the market answers' tags are weak (W/"…"), and RFC 9110 §8.8.1
// lets a weak tag be shared by the representations of one resource that
// differ only in content coding: the identity and gzip answers carry the
// same tag, and If-None-Match with either gets a 304 whichever coding the
// request takes. A strong tag would have to differ between the two.
//
// Three kinds of answers are compressed three ways:
//   - the memoised market answers (serveCached): the bytes before meta are
//     deflated once per snapshot and key (gzipPrefix, memoised beside the
//     identity bytes, counted against the same bound), and each answer
//     appends its meta as a stored deflate block: a /markets page or a
//     history costs a CRC of its meta, not a compression, and less than
//     its identity answer, which copies the data into the envelope;
//   - the embedded documents (openapi.json, /docs, docs.js: asset),
//     compressed once per process at the best compression;
//   - the rest (portfolios, alerts, usage, searches, errors, idempotent
//     replays: writeBody, writeGzip), compressed as they are sent, at
//     gzip.BestSpeed.

// gzipMin is the smallest body compressed: below it, the work saves
// little (the 435-byte /markets/global would go to 315, less than a
// packet either way), and the answer keeps its header entries
// (bench/README.md, limits: past 8 of them, net/http's work grows).
const gzipMin = 1024

// Levels (measured in bench/README.md, Compression): an answer compressed
// as it is sent takes gzip.BestSpeed, 2 to 3 times as fast as the
// default level for 11 to 20% more bytes; a memoised market answer,
// compressed once per snapshot for every client that asks for it, takes
// the default level, and the embedded documents, compressed once per
// process, the best.
const (
	gzipLevel       = gzip.BestSpeed
	gzipMemoLevel   = gzip.DefaultCompression
	gzipStaticLevel = gzip.BestCompression
)

// gzipAccept is what a request's Accept-Encoding says of gzip.
type gzipAccept uint8

const (
	gzipNo   gzipAccept = iota // no Accept-Encoding, gzip not acceptable, or identity preferred
	gzipYes                    // gzip is acceptable: answers of gzipMin bytes or more take it
	gzipOnly                   // identity is refused (identity;q=0, or *;q=0 without identity): every body takes gzip
)

// parseAcceptEncoding reads the Accept-Encoding field values (RFC 9110
// §12.5.3): codings with optional weights; "x-gzip" is gzip (§8.4.1.3);
// "*" stands for every coding not listed, identity included; identity is
// acceptable unless refused. gzip is chosen when its weight is above 0
// and not below identity's (when identity's is given, directly or by
// "*"); an empty field asks for no coding. An element with a malformed
// weight is ignored.
func parseAcceptEncoding(values []string) gzipAccept {
	gz, identity, star := -1, -1, -1 // weights in thousandths; -1: not listed
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(elem, ";")
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			q := weight(params)
			if q < 0 {
				continue
			}
			switch {
			case strings.EqualFold(name, "gzip"), strings.EqualFold(name, "x-gzip"):
				gz = max(gz, q)
			case strings.EqualFold(name, "identity"):
				identity = max(identity, q)
			case name == "*":
				star = max(star, q)
			}
		}
	}
	if gz < 0 {
		gz = star
	}
	if identity < 0 {
		identity = star
	}
	switch {
	case gz <= 0:
		return gzipNo
	case identity == 0:
		return gzipOnly
	case identity > gz:
		return gzipNo
	}
	return gzipYes
}

// weight returns the q parameter among a coding's parameters, in
// thousandths (1000 when there is none), or -1 if it is malformed.
func weight(params string) int {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(p, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		return qvalue(strings.TrimSpace(v))
	}
	return 1000
}

// qvalue parses a weight: "0" to "1" with at most three decimals (RFC 9110
// §12.4.2), in thousandths, or -1.
func qvalue(s string) int {
	if s == "" || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return -1
	}
	q := int(s[0]-'0') * 1000
	if len(s) == 1 {
		return q
	}
	if s[1] != '.' {
		return -1
	}
	for i, scale := 2, 100; i < len(s); i, scale = i+1, scale/10 {
		c := s[i]
		if c < '0' || c > '9' {
			return -1
		}
		q += int(c-'0') * scale
	}
	if q > 1000 {
		return -1
	}
	return q
}

// gzips reports whether an answer with status and an n-byte body goes out
// gzip-encoded. The caller has checked that e.gzip is not gzipNo.
func (e *exchange) gzips(status, n int) bool {
	if status < 200 || status == http.StatusNoContent || status == http.StatusNotModified || n == 0 ||
		e.gzip == gzipYes && n < gzipMin || e.gzip == gzipNo {
		return false
	}
	_, encoded := e.Header()["Content-Encoding"]
	return !encoded
}

// writeBody writes the answer's status and its whole body, gzip-encoded
// when the request takes it and the body is large enough (see gzips).
// Every JSON answer but the memoised market ones ends here.
func writeBody(w http.ResponseWriter, status int, body []byte) error {
	if e, ok := w.(*exchange); ok && e.gzip != gzipNo && e.gzips(status, len(body)) {
		return e.writeGzip(status, body)
	}
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzipLevel)
	return zw
}}

// writeGzip compresses body as it sends it.
func (e *exchange) writeGzip(status int, body []byte) error {
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	buf.Reset()
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(buf)
	zw.Write(body) // a bytes.Buffer takes every write
	zw.Close()
	zw.Reset(io.Discard) // not holding buf while pooled
	gzipWriters.Put(zw)
	return e.writeEncoded(status, body, buf.Bytes())
}

// writeEncoded sends the gzip-encoded parts of an answer whose body is
// identity as it is: the headers of an encoded answer, then the parts.
// An Idempotency-Key keeps identity, so that the answer is sent again in
// the coding the request sent again takes (nil for an answer that is
// never kept: a GET's).
func (e *exchange) writeEncoded(status int, identity []byte, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h := e.Header()
	h["Content-Encoding"] = hdrGzip
	addVary(h)
	h["Content-Length"] = []string{strconv.Itoa(n)}
	if e.capturing {
		e.captured = append(e.captured, identity...)
	}
	e.WriteHeader(status)
	for _, p := range parts {
		if _, err := e.write(p); err != nil {
			return err
		}
	}
	return nil
}

var (
	hdrGzip = []string{"gzip"}
	// hdrVary is the Vary of an answer whose coding follows the request's
	// Accept-Encoding.
	hdrVary = []string{"Accept-Encoding"}
)

// addVary adds Accept-Encoding to the answer's Vary, unless it is there.
func addVary(h http.Header) {
	vary, ok := h["Vary"]
	if !ok {
		h["Vary"] = hdrVary
		return
	}
	for _, v := range vary {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, "Accept-Encoding") {
				return
			}
		}
	}
	h["Vary"] = append(vary[:len(vary):len(vary)], "Accept-Encoding")
}

// The envelope around a memoised answer's data: the head and middle are
// the same for every answer, meta and the end are each answer's own.
const (
	envelopeHead = `{"success":true,"data":`
	envelopeMid  = `,"meta":`
	envelopeEnd  = "}\n"
)

// gzipHeader starts a gzip member: deflate, no flags, no time, no extra
// flags, an unknown OS (RFC 1952; Go's gzip.Writer writes the same).
var gzipHeader = [10]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}

// gzipPrefix is a memoised answer's gzip form up to its meta: the gzip
// header, then envelopeHead, the data and envelopeMid deflated and
// flushed (a sync flush: the stream stops at a byte boundary, no block
// final), so that the rest of the answer can follow as deflate blocks of
// its own; and the CRC-32 and length of the bytes it holds, which the
// trailer continues.
type gzipPrefix struct {
	of   *cached // the answer it compresses
	data []byte
	crc  uint32
	size int
}

// MemoSize counts p against its snapshot's memo budget.
func (p *gzipPrefix) MemoSize() int { return cap(p.data) + 64 }

var flateWriters = sync.Pool{New: func() any {
	fw, _ := flate.NewWriter(io.Discard, gzipMemoLevel)
	return fw
}}

func newGzipPrefix(c *cached) *gzipPrefix {
	buf := bytes.NewBuffer(make([]byte, 0, len(gzipHeader)+len(c.body)/3+64))
	buf.Write(gzipHeader[:])
	fw := flateWriters.Get().(*flate.Writer)
	fw.Reset(buf)
	fw.Write([]byte(envelopeHead))
	fw.Write(c.body)
	fw.Write([]byte(envelopeMid))
	fw.Flush()
	fw.Reset(io.Discard)
	flateWriters.Put(fw)
	crc := crc32.Update(0, crc32.IEEETable, []byte(envelopeHead))
	crc = crc32.Update(crc, crc32.IEEETable, c.body)
	crc = crc32.Update(crc, crc32.IEEETable, []byte(envelopeMid))
	return &gzipPrefix{of: c, data: buf.Bytes(), crc: crc, size: len(envelopeHead) + len(c.body) + len(envelopeMid)}
}

// storedBlockRoom is where writeCachedGzip writes the header of the
// stored block that holds an answer's meta.
var storedBlockRoom [5]byte

// writeCachedGzip sends c, the answer memoised under key in snap,
// gzip-encoded: its prefix, memoised beside it, then the rest of the
// answer (end: room for a stored block's header, then meta and the
// envelope's end) as a final stored block, and the trailer. An answer
// that is not memoised (key "": a search), whose prefix would serve once,
// and one whose end is longer than a stored block holds (64 KiB; meta is
// far less) are compressed whole as they are sent, as writeBody does.
func writeCachedGzip(e *exchange, snap *market.Snapshot, key string, c *cached, end *bytes.Buffer) error {
	b := end.Bytes()
	tail := b[len(storedBlockRoom):]
	n := len(tail)
	if n > 0xffff || key == "" {
		var whole bytes.Buffer
		whole.Grow(len(envelopeHead) + len(c.body) + len(envelopeMid) + n)
		whole.WriteString(envelopeHead)
		whole.Write(c.body)
		whole.WriteString(envelopeMid)
		whole.Write(tail)
		return e.writeGzip(http.StatusOK, whole.Bytes())
	}
	p, _ := market.Memo(snap, key+"|gzip", func() (*gzipPrefix, error) { return newGzipPrefix(c), nil })
	if p == nil || p.of != c {
		// c was built again (its snapshot's memo is full, or retired): so
		// is its prefix.
		p = newGzipPrefix(c)
	}
	b[0], b[1], b[2], b[3], b[4] = 1, byte(n), byte(n>>8), ^byte(n), ^byte(n>>8) // BFINAL, stored; LEN, NLEN
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[:4], crc32.Update(p.crc, crc32.IEEETable, tail))
	binary.LittleEndian.PutUint32(trailer[4:], uint32(p.size+n)) // ISIZE: the length modulo 2³²
	end.Write(trailer[:])
	return e.writeEncoded(http.StatusOK, nil, p.data, end.Bytes())
}

// asset is an embedded document, with its gzip form made at first need.
type asset struct {
	body []byte
	gz   func() []byte
}

func newAsset(body []byte) *asset {
	return &asset{body: body, gz: sync.OnceValue(func() []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzipStaticLevel)
		zw.Write(body)
		zw.Close()
		return buf.Bytes()
	})}
}
