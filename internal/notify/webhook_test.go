package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"coinpulse"
)

// The test vector of the Standard Webhooks reference libraries.
const (
	vecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTS     = 1614265330
	vecBody   = `{"test": 2432232314}`
	vecSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignVector(t *testing.T) {
	ts := time.Unix(vecTS, 0)
	got, err := Sign(vecSecret, vecID, ts, []byte(vecBody))
	if err != nil {
		t.Fatal(err)
	}
	// Computed here independently of Sign.
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(vecSecret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(vecID + "." + strconv.FormatInt(vecTS, 10) + "." + vecBody))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if want != vecSig {
		t.Fatalf("the independent computation gives %s, the vector says %s", want, vecSig)
	}
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	// A time's sub-second part and zone do not matter.
	got2, _ := Sign(vecSecret, vecID, time.Unix(vecTS, 999_999_999).In(time.FixedZone("X", 3600)), []byte(vecBody))
	if got2 != want {
		t.Errorf("Sign with nanoseconds = %s, want %s", got2, want)
	}

	h, err := Headers(vecSecret, vecID, ts, []byte(vecBody))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"webhook-id": vecID, "webhook-timestamp": "1614265330", "webhook-signature": vecSig} {
		if got := h.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if len(h) != 3 {
		t.Errorf("Headers has %d headers: %v", len(h), h)
	}
	wh, err := standardwebhooks.NewWebhook(vecSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.VerifyIgnoringTimestamp([]byte(vecBody), h); err != nil {
		t.Errorf("the library refuses the vector: %v", err)
	}
}

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		s, err := NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		if seen[s] {
			t.Fatalf("NewSecret repeated %s", s)
		}
		seen[s] = true
		enc, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			t.Fatalf("NewSecret = %q, want the whsec_ prefix", s)
		}
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(key) < 24 || len(key) > 32 {
			t.Fatalf("NewSecret = %q: %d bytes, %v", s, len(key), err)
		}
		if _, err := standardwebhooks.NewWebhook(s); err != nil {
			t.Fatalf("the library refuses %q: %v", s, err)
		}
	}
}

// The official library verifies what Headers signs, with the current time,
// and refuses it when anything changes.
func TestHeadersVerifiedByLibrary(t *testing.T) {
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"alert.triggered","data":{"coin":"bitcoin","price":"64000.5"}}`)
	h, err := Headers(secret, "msg_2b7LsHtNk1s2h1W2", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(body, h); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := wh.Verify(append(body[:len(body):len(body)], ' '), h); err == nil {
		t.Error("Verify accepts a changed body")
	}
	h2 := h.Clone()
	h2.Set("webhook-id", "msg_other")
	if err := wh.Verify(body, h2); err == nil {
		t.Error("Verify accepts a changed id")
	}
	other, _ := NewSecret()
	wh2, _ := standardwebhooks.NewWebhook(other)
	if err := wh2.Verify(body, h); err == nil {
		t.Error("another secret verifies the signature")
	}
}

func TestSignErrors(t *testing.T) {
	long := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	for _, tt := range []struct{ secret, id, want string }{
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", vecID, "the signing secret does not start with whsec_"},
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS!", vecID, "the signing secret is not valid base64 after whsec_"},
		{short, vecID, "the signing secret has 16 bytes, not 24 to 64"},
		{long, vecID, "the signing secret has 65 bytes, not 24 to 64"},
		{"", vecID, "the signing secret does not start with whsec_"},
		{vecSecret, "", "the message id is empty"},
	} {
		_, err := Sign(tt.secret, tt.id, time.Unix(vecTS, 0), []byte(vecBody))
		if err == nil || err.Error() != tt.want {
			t.Errorf("Sign(%q, %q) = %v, want %q", tt.secret, tt.id, err, tt.want)
		}
		if _, err := Headers(tt.secret, tt.id, time.Unix(vecTS, 0), []byte(vecBody)); err == nil {
			t.Errorf("Headers(%q, %q) accepted", tt.secret, tt.id)
		}
	}
}

// receiver is an httptest server on 127.0.0.1 that counts its requests.
type receiver struct {
	*httptest.Server
	hits atomic.Int64
}

func newReceiver(t *testing.T, h http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		h(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func testDelivery() coinpulse.Delivery {
	return coinpulse.Delivery{
		ID:         7,
		Kind:       coinpulse.KindWebhook,
		EndpointID: 3,
		EventID:    "msg_31xSxbc5ggVGbxXadYPRVrw1",
		EventType:  coinpulse.EventAlertTriggered,
		Payload:    []byte(`{"type":"alert.triggered","data":{"alert_id":42,"coin":"bitcoin","price":"70123.45"}}`),
		Status:     coinpulse.DeliveryPending,
	}
}

func testSecret(t *testing.T) string {
	t.Helper()
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSendDelivered(t *testing.T) {
	secret := testSecret(t)
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	d := testDelivery()
	var mu sync.Mutex
	var ids []string
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if err := wh.Verify(body, r.Header); err != nil {
			t.Errorf("the receiver cannot verify the delivery: %v", err)
			http.Error(w, err.Error(), 400)
			return
		}
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" ||
			r.Header.Get("User-Agent") != "Coinpulse-Webhooks/1" || string(body) != string(d.Payload) {
			t.Errorf("request %s, Content-Type %q, User-Agent %q, body %s", r.Method,
				r.Header.Get("Content-Type"), r.Header.Get("User-Agent"), body)
		}
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	s := NewSender(SenderOptions{AllowPrivate: true})
	for range 2 {
		res := s.Send(context.Background(), recv.URL+"/hooks", secret, d, time.Now())
		if !res.Delivered() || res.Err != nil || res.StatusCode != 204 || res.Retry || res.Gone || res.Duration <= 0 {
			t.Fatalf("Send = %+v, want delivered", res)
		}
		a := s.Outcome(res, 1, t0)
		if a.Status != coinpulse.DeliveryDelivered || a.StatusCode != 204 || a.Error != "" || a.DisableEndpoint != "" || !a.At.Equal(t0) {
			t.Errorf("Outcome = %+v", a)
		}
	}
	// Every attempt of a delivery carries its event's id.
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] != d.EventID || ids[1] != d.EventID {
		t.Errorf("webhook-ids %v, want %s twice", ids, d.EventID)
	}
}

func TestSendTimeout(t *testing.T) {
	release := make(chan struct{})
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server notices the hang-up
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	s := NewSender(SenderOptions{AllowPrivate: true, Timeout: 300 * time.Millisecond})
	res := s.Send(context.Background(), recv.URL, testSecret(t), testDelivery(), time.Now())
	if !res.Retry || res.Gone || res.StatusCode != 0 || res.Err == nil {
		t.Fatalf("Send = %+v, want a retry", res)
	}
	if res.Duration < 300*time.Millisecond || res.Duration > 3*time.Second {
		t.Errorf("the attempt took %v, want about 300ms", res.Duration)
	}
	if got := res.Err.Error(); got != "no response within 300ms" {
		t.Errorf("error %q", got)
	}
}

func TestSendStatuses(t *testing.T) {
	tests := []struct {
		code      int
		retry     bool
		gone      bool
		wantError string
	}{
		{200, false, false, ""},
		{202, false, false, ""},
		{299, false, false, ""},
		{400, true, false, "the endpoint answered 400 Bad Request"},
		{401, true, false, "the endpoint answered 401 Unauthorized"},
		{404, true, false, "the endpoint answered 404 Not Found"},
		{410, false, true, "the endpoint answered 410 Gone"},
		{429, true, false, "the endpoint answered 429 Too Many Requests"},
		{500, true, false, "the endpoint answered 500 Internal Server Error"},
		{503, true, false, "the endpoint answered 503 Service Unavailable"},
		{599, true, false, "the endpoint answered 599"},
		{304, true, false, "the endpoint answered 304 Not Modified; redirects are not followed (Location: none)"},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.code), func(t *testing.T) {
			recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.code)
				io.WriteString(w, "some body")
			})
			s := NewSender(SenderOptions{AllowPrivate: true})
			res := s.Send(context.Background(), recv.URL, testSecret(t), testDelivery(), time.Now())
			if res.StatusCode != tt.code || res.Retry != tt.retry || res.Gone != tt.gone || res.Delivered() != (tt.wantError == "") {
				t.Fatalf("Send = %+v", res)
			}
			if tt.wantError != "" && res.Err.Error() != tt.wantError {
				t.Errorf("error %q, want %q", res.Err, tt.wantError)
			}
		})
	}
}

// A redirect is a failed attempt, and its target is never requested.
func TestSendRedirectNotFollowed(t *testing.T) {
	target := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
	for _, code := range []int{301, 302, 303, 307, 308} {
		loc := target.URL + "/"
		recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, loc, code)
		})
		s := NewSender(SenderOptions{AllowPrivate: true})
		res := s.Send(context.Background(), recv.URL, testSecret(t), testDelivery(), time.Now())
		if !res.Retry || res.Gone || res.StatusCode != code || res.Err == nil {
			t.Fatalf("%d: Send = %+v, want a retry", code, res)
		}
		want := fmt.Sprintf("the endpoint answered %d %s; redirects are not followed (Location: %s)", code, http.StatusText(code), loc)
		if res.Err.Error() != want {
			t.Errorf("%d: error %q, want %q", code, res.Err, want)
		}
		if recv.hits.Load() != 1 {
			t.Errorf("%d: the endpoint got %d requests", code, recv.hits.Load())
		}
	}
	if n := target.hits.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
}

func TestSendLongLocation(t *testing.T) {
	loc := "http://127.0.0.1:1/" + strings.Repeat("é", 300)
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", loc)
		w.WriteHeader(302)
	})
	res := NewSender(SenderOptions{AllowPrivate: true}).Send(context.Background(), recv.URL, testSecret(t), testDelivery(), time.Now())
	msg := res.Err.Error()
	if !strings.HasSuffix(msg, "…)") || len(msg) > 300 || !strings.Contains(msg, "(Location: http://127.0.0.1:1/éé") {
		t.Errorf("error %q", msg)
	}
}

// The default Sender refuses 127.0.0.1 when it dials.
func TestSendRefusesLoopback(t *testing.T) {
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
	s := NewSender(SenderOptions{})
	for _, u := range []string{recv.URL, strings.Replace(recv.URL, "127.0.0.1", "[::ffff:127.0.0.1]", 1)} {
		res := s.Send(context.Background(), u, testSecret(t), testDelivery(), time.Now())
		var ae *AddrError
		if !res.Retry || res.Gone || res.StatusCode != 0 || !errors.As(res.Err, &ae) {
			t.Fatalf("Send(%s) = %+v, want a retry refused at dial time", u, res)
		}
		if got := res.Err.Error(); got != "refused to connect to 127.0.0.1, a loopback address" {
			t.Errorf("error %q", got)
		}
	}
	if n := recv.hits.Load(); n != 0 {
		t.Fatalf("the receiver got %d requests", n)
	}
}

// DNS rebinding: a name that resolved to a public address at registration
// and to 127.0.0.1 when the delivery is sent is refused at dial time.
func TestSendDNSRebinding(t *testing.T) {
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
	_, port, _ := net.SplitHostPort(recv.Listener.Addr().String())
	dns := newFakeDNS().set("evil.test", "8.8.8.8")
	endpoint := "http://evil.test:" + port + "/hook"
	if err := CheckURL(context.Background(), endpoint, false, dns.resolver()); err != nil {
		t.Fatalf("CheckURL at registration: %v", err)
	}
	dns.set("evil.test", "127.0.0.1")
	if err := CheckURL(context.Background(), endpoint, false, dns.resolver()); err == nil ||
		err.Error() != "the host resolves to 127.0.0.1, a loopback address" {
		t.Fatalf("CheckURL after rebinding: %v", err)
	}

	s := NewSender(SenderOptions{Resolver: dns.resolver()})
	res := s.Send(context.Background(), endpoint, testSecret(t), testDelivery(), time.Now())
	var ae *AddrError
	if !res.Retry || !errors.As(res.Err, &ae) || ae.Reason != "a loopback address" {
		t.Fatalf("Send = %+v, want refused at dial time", res)
	}
	if n := recv.hits.Load(); n != 0 {
		t.Fatalf("the receiver got %d requests", n)
	}

	// The same resolver with AllowPrivate reaches the receiver: the Sender
	// does resolve with it.
	s = NewSender(SenderOptions{Resolver: dns.resolver(), AllowPrivate: true})
	if res := s.Send(context.Background(), endpoint, testSecret(t), testDelivery(), time.Now()); !res.Delivered() {
		t.Fatalf("Send with AllowPrivate = %+v", res)
	}
	if n := recv.hits.Load(); n != 1 {
		t.Fatalf("the receiver got %d requests, want 1", n)
	}
}

// The Sender never goes through the proxy of the environment.
func TestSendIgnoresProxyEnvironment(t *testing.T) {
	proxy := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
		t.Setenv(k, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	_, port, _ := net.SplitHostPort(recv.Listener.Addr().String())
	dns := newFakeDNS().set("hooks.test", "127.0.0.1")
	s := NewSender(SenderOptions{Resolver: dns.resolver(), AllowPrivate: true})
	res := s.Send(context.Background(), "http://hooks.test:"+port+"/", testSecret(t), testDelivery(), time.Now())
	if !res.Delivered() || recv.hits.Load() != 1 || proxy.hits.Load() != 0 {
		t.Fatalf("Send = %+v; receiver %d, proxy %d requests", res, recv.hits.Load(), proxy.hits.Load())
	}
}

func TestSendConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := NewSender(SenderOptions{AllowPrivate: true, Timeout: 2 * time.Second})
	res := s.Send(context.Background(), "http://"+addr+"/", testSecret(t), testDelivery(), time.Now())
	if !res.Retry || res.Gone || res.StatusCode != 0 || res.Err == nil {
		t.Fatalf("Send = %+v, want a retry", res)
	}
	if msg := res.Err.Error(); !strings.Contains(msg, "connection refused") || strings.Contains(msg, "Post ") {
		t.Errorf("error %q", msg)
	}
}

func TestSendUnknownHost(t *testing.T) {
	s := NewSender(SenderOptions{Resolver: newFakeDNS().resolver()})
	res := s.Send(context.Background(), "https://absent.test/", testSecret(t), testDelivery(), time.Now())
	if !res.Retry || res.Err == nil || res.Err.Error() != "the host was not found in DNS" {
		t.Fatalf("Send = %+v", res)
	}
}

// A large response body is not read to its end.
func TestSendLargeBody(t *testing.T) {
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 32<<10))
		for i := 0; i < 1<<10; i++ { // 32 MiB unless the client hangs up
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	s := NewSender(SenderOptions{AllowPrivate: true, Timeout: 5 * time.Second})
	res := s.Send(context.Background(), recv.URL, testSecret(t), testDelivery(), time.Now())
	if !res.Delivered() || res.StatusCode != 200 {
		t.Fatalf("Send = %+v", res)
	}
}

func TestSendCanceled(t *testing.T) {
	release := make(chan struct{})
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server notices the hang-up
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	s := NewSender(SenderOptions{AllowPrivate: true})
	res := s.Send(ctx, recv.URL, testSecret(t), testDelivery(), time.Now())
	if !res.Retry || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("Send = %+v, want context.Canceled", res)
	}
	if got := res.Err.Error(); got != "the attempt was interrupted: context canceled" {
		t.Errorf("error %q", got)
	}
}

// A delivery that cannot be sent as stored fails at once, and the error
// does not show the secret.
func TestSendPermanentFailure(t *testing.T) {
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
	s := NewSender(SenderOptions{AllowPrivate: true})
	badSecret := "whsec_tooshort"
	noID := testDelivery()
	noID.EventID = ""
	for _, c := range []struct {
		url, secret string
		d           coinpulse.Delivery
		want        string
	}{
		{recv.URL, badSecret, testDelivery(), "cannot sign the delivery: the signing secret has 6 bytes, not 24 to 64"},
		{recv.URL, "s3cr3t-value", testDelivery(), "cannot sign the delivery: the signing secret does not start with whsec_"},
		{recv.URL, testSecret(t), noID, "cannot sign the delivery: the message id is empty"},
		{"ftp://example.com/", testSecret(t), testDelivery(), "the endpoint URL is not a valid http or https URL"},
		{"http://[::1", testSecret(t), testDelivery(), "the endpoint URL is not a valid http or https URL"},
	} {
		res := s.Send(context.Background(), c.url, c.secret, c.d, time.Now())
		if res.Retry || res.Gone || res.Err == nil || res.Err.Error() != c.want {
			t.Errorf("Send(%s, %s) = %+v, want %q", c.url, c.secret, res, c.want)
		}
		if strings.Contains(res.Err.Error(), "s3cr3t") || strings.Contains(res.Err.Error(), "tooshort") {
			t.Errorf("the error shows the secret: %v", res.Err)
		}
		a := s.Outcome(res, 1, t0)
		if a.Status != coinpulse.DeliveryFailed || a.DisableEndpoint != "" || a.Error != c.want {
			t.Errorf("Outcome = %+v", a)
		}
	}
	if n := recv.hits.Load(); n != 0 {
		t.Errorf("the receiver got %d requests", n)
	}
}

func TestOutcome(t *testing.T) {
	s := NewSender(SenderOptions{Rand: fixed(0.5)})
	r500 := Result{StatusCode: 500, Err: errors.New("the endpoint answered 500 Internal Server Error"), Retry: true}

	a := s.Outcome(Result{StatusCode: 200}, 3, t0)
	if a != (coinpulse.Attempt{At: t0, Status: coinpulse.DeliveryDelivered, StatusCode: 200}) {
		t.Errorf("delivered: %+v", a)
	}

	a = s.Outcome(Result{StatusCode: 410, Err: errors.New("the endpoint answered 410 Gone"), Gone: true}, 1, t0)
	want := coinpulse.Attempt{At: t0, Status: coinpulse.DeliveryFailed, StatusCode: 410,
		Error: "the endpoint answered 410 Gone", DisableEndpoint: "the endpoint answered 410 Gone"}
	if a != want {
		t.Errorf("gone: %+v, want %+v", a, want)
	}

	for attempts := 1; attempts < MaxAttempts; attempts++ {
		a = s.Outcome(r500, attempts, t0)
		next, _ := NextAttempt(attempts, t0, fixed(0.5))
		want := coinpulse.Attempt{At: t0, Status: coinpulse.DeliveryPending, NextAttemptAt: next, StatusCode: 500,
			Error: "the endpoint answered 500 Internal Server Error"}
		if a != want {
			t.Errorf("retry %d: %+v, want %+v", attempts, a, want)
		}
	}

	a = s.Outcome(r500, MaxAttempts, t0)
	want = coinpulse.Attempt{At: t0, Status: coinpulse.DeliveryFailed, StatusCode: 500,
		Error:           "the endpoint answered 500 Internal Server Error",
		DisableEndpoint: "a delivery failed 11 times over about 32 hours; last error: the endpoint answered 500 Internal Server Error"}
	if a != want {
		t.Errorf("give up: %+v, want %+v", a, want)
	}

	long := Result{Err: errors.New(strings.Repeat("ü", 400)), Retry: true}
	a = s.Outcome(long, MaxAttempts, t0)
	if len(a.Error) > 300 || len(a.DisableEndpoint) > 300 || !strings.HasSuffix(a.Error, "ü…") || !strings.HasSuffix(a.DisableEndpoint, "ü…") {
		t.Errorf("long errors not cut: %d %q, %d %q", len(a.Error), a.Error, len(a.DisableEndpoint), a.DisableEndpoint)
	}
}

// The request URL is the endpoint's, verbatim (path and query).
func TestSendURL(t *testing.T) {
	var got atomic.Value
	recv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { got.Store(r.URL.RequestURI()) })
	s := NewSender(SenderOptions{AllowPrivate: true, UserAgent: "test-agent"})
	u, _ := url.Parse(recv.URL)
	u.Path = "/a/b"
	u.RawQuery = "token=x&y=%20"
	if res := s.Send(context.Background(), u.String(), testSecret(t), testDelivery(), time.Now()); !res.Delivered() {
		t.Fatalf("Send = %+v", res)
	}
	if got := got.Load(); got != "/a/b?token=x&y=%20" {
		t.Errorf("request URI %q", got)
	}
}
