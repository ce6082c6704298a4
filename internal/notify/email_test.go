package notify

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"coinpulse"
)

// smtpTestOptions shape a test SMTP server.
type smtpTestOptions struct {
	user, pass   string // offer AUTH PLAIN and require it, with these credentials
	insecureAuth bool   // allow AUTH without TLS
	startTLS     bool   // offer STARTTLS
	implicitTLS  bool   // TLS from the first byte
	tlsMax       uint16 // with implicitTLS: the highest TLS version taken (0: Go's)
	rcptErr      error  // the reply to every RCPT
	dataErr      error  // the reply to every DATA
}

// smtpReceived is a message the test server accepted.
type smtpReceived struct {
	from     string
	to       []string
	data     []byte
	tls      bool   // the session was encrypted
	authUser string // who authenticated, if anyone
}

// smtpTestServer is a go-smtp server on 127.0.0.1 that records what it
// accepts.
type smtpTestServer struct {
	host string
	port int
	opts smtpTestOptions

	mu       sync.Mutex
	msgs     []smtpReceived
	authSeen []string // "user:password" of every AUTH attempt
}

func startSMTPServer(t *testing.T, opts smtpTestOptions) *smtpTestServer {
	t.Helper()
	ts := &smtpTestServer{opts: opts}
	s := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		_, isTLS := c.TLSConnectionState()
		return &smtpTestSession{srv: ts, tls: isTLS}, nil
	}))
	s.Domain = "localhost"
	s.ReadTimeout = 10 * time.Second
	s.WriteTimeout = 10 * time.Second
	s.AllowInsecureAuth = opts.insecureAuth
	s.ErrorLog = log.New(io.Discard, "", 0)
	if opts.startTLS {
		s.TLSConfig = smtpTestTLSConfig(t)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.host, ts.port = "127.0.0.1", l.Addr().(*net.TCPAddr).Port
	if opts.implicitTLS {
		cfg := smtpTestTLSConfig(t)
		if opts.tlsMax != 0 {
			cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, opts.tlsMax
		}
		l = tls.NewListener(l, cfg)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(l)
	}()
	t.Cleanup(func() {
		// Close the listener too: s.Close misses it when Serve has not
		// started yet.
		s.Close()
		l.Close()
		<-done
	})
	return ts
}

func (ts *smtpTestServer) received() []smtpReceived {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]smtpReceived(nil), ts.msgs...)
}

func (ts *smtpTestServer) authTries() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.authSeen...)
}

type smtpTestSession struct {
	srv      *smtpTestServer
	tls      bool
	authUser string
	from     string
	to       []string
}

func (s *smtpTestSession) AuthMechanisms() []string {
	if s.srv.opts.user == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (s *smtpTestSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		s.srv.mu.Lock()
		s.srv.authSeen = append(s.srv.authSeen, username+":"+password)
		s.srv.mu.Unlock()
		if username != s.srv.opts.user || password != s.srv.opts.pass {
			return smtp.ErrAuthFailed
		}
		s.authUser = username
		return nil
	}), nil
}

func (s *smtpTestSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.srv.opts.user != "" && s.authUser == "" {
		return smtp.ErrAuthRequired
	}
	s.from = from
	return nil
}

func (s *smtpTestSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if s.srv.opts.rcptErr != nil {
		return s.srv.opts.rcptErr
	}
	s.to = append(s.to, to)
	return nil
}

func (s *smtpTestSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s.srv.opts.dataErr != nil {
		return s.srv.opts.dataErr
	}
	s.srv.mu.Lock()
	s.srv.msgs = append(s.srv.msgs, smtpReceived{from: s.from, to: s.to, data: b, tls: s.tls, authUser: s.authUser})
	s.srv.mu.Unlock()
	return nil
}

func (s *smtpTestSession) Reset()        { s.from, s.to = "", nil }
func (s *smtpTestSession) Logout() error { return nil }

// smtpTestTLSConfig is a server config with a fresh self-signed
// certificate for 127.0.0.1 and localhost.
func smtpTestTLSConfig(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "coinpulse test smtp"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}
}

// smtpTestMailer is a Mailer for ts (no TLS, no auth), changed by edit.
func smtpTestMailer(t *testing.T, ts *smtpTestServer, edit func(*SMTPConfig)) *Mailer {
	t.Helper()
	cfg := SMTPConfig{
		Host:     ts.host,
		Port:     ts.port,
		From:     "Coinpulse <alerts@coinpulse.test>",
		StartTLS: StartTLSNone,
		Timeout:  5 * time.Second,
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := NewMailer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func smtpTestAlert() AlertMail {
	return AlertMail{
		AlertID:        12,
		EventID:        "msg_2kwpbgllafxdpx2ai54ppj85f4",
		Mode:           coinpulse.ModeLive,
		CoinID:         "bitcoin",
		CoinSymbol:     "btc",
		Condition:      coinpulse.Above,
		TargetPrice:    "50000",
		TriggeredPrice: "50123.45",
		TriggeredAt:    time.Date(2026, 3, 1, 12, 34, 56, 0, time.UTC),
	}
}

// smtpOne returns the only message ts received.
func smtpOne(t *testing.T, ts *smtpTestServer) smtpReceived {
	t.Helper()
	msgs := ts.received()
	if len(msgs) != 1 {
		t.Fatalf("server received %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

// smtpBody is the decoded text of a single-part message.
func smtpBody(t *testing.T, msg *mail.Message) string {
	t.Helper()
	var r io.Reader = msg.Body
	switch enc := strings.ToLower(msg.Header.Get("Content-Transfer-Encoding")); enc {
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	case "", "7bit", "8bit":
	default:
		t.Fatalf("Content-Transfer-Encoding %q", enc)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\r\n", "\n") // SMTP's line ends
}

func TestSendAlertDelivers(t *testing.T) {
	ts := startSMTPServer(t, smtpTestOptions{})
	m := smtpTestMailer(t, ts, nil)
	a := smtpTestAlert()

	before := time.Now().Truncate(time.Second)
	if err := m.SendAlert(context.Background(), "Ada <ada@example.com>", a); err != nil {
		t.Fatal(err)
	}
	after := time.Now()

	got := smtpOne(t, ts)
	if got.from != "alerts@coinpulse.test" {
		t.Errorf("MAIL FROM %q, want alerts@coinpulse.test", got.from)
	}
	if len(got.to) != 1 || got.to[0] != "ada@example.com" {
		t.Errorf("RCPT TO %q, want [ada@example.com]", got.to)
	}
	if got.tls || got.authUser != "" {
		t.Errorf("tls %v, auth %q: want neither", got.tls, got.authUser)
	}

	msg, err := mail.ReadMessage(strings.NewReader(string(got.data)))
	if err != nil {
		t.Fatalf("%v\n%s", err, got.data)
	}
	h := msg.Header
	if from, err := h.AddressList("From"); err != nil || len(from) != 1 ||
		from[0].Address != "alerts@coinpulse.test" || from[0].Name != "Coinpulse" {
		t.Errorf("From %v (%v)", from, err)
	}
	if to, err := h.AddressList("To"); err != nil || len(to) != 1 || to[0].Address != "ada@example.com" {
		t.Errorf("To %v (%v)", to, err)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(h.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "BTC is above 50,000 USD — Coinpulse alert #12"; subject != want {
		t.Errorf("Subject %q, want %q", subject, want)
	}
	if d, err := h.Date(); err != nil || d.Before(before) || d.After(after) {
		t.Errorf("Date %v (%v), want between %v and %v", d, err, before, after)
	}
	if got, want := h.Get("Message-Id"), "<msg_2kwpbgllafxdpx2ai54ppj85f4@coinpulse.test>"; got != want {
		t.Errorf("Message-ID %q, want %q", got, want)
	}
	for k, want := range map[string]string{
		"X-Coinpulse-Event-Id": "msg_2kwpbgllafxdpx2ai54ppj85f4",
		"X-Coinpulse-Alert-Id": "12",
		"Auto-Submitted":       "auto-generated",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
	if ct, params, err := mime.ParseMediaType(h.Get("Content-Type")); err != nil || ct != "text/plain" ||
		!strings.EqualFold(params["charset"], "utf-8") {
		t.Errorf("Content-Type %q", h.Get("Content-Type"))
	}
	body := smtpBody(t, msg)
	for _, want := range []string{
		"alert #12 has fired: BTC is above 50,000 USD.",
		"Coin:       BTC (bitcoin)\n",
		"Condition:  price above 50,000 USD\n",
		"Price:      50,123.45 USD\n",
		"Triggered:  2026-03-01 12:34:56 UTC\n",
		"msg_2kwpbgllafxdpx2ai54ppj85f4",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "Sandbox") {
		t.Errorf("live alert's body mentions the sandbox:\n%s", body)
	}
}

func TestSendAlertSameEventSameMessageID(t *testing.T) {
	ts := startSMTPServer(t, smtpTestOptions{})
	m := smtpTestMailer(t, ts, nil)
	for range 2 {
		if err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert()); err != nil {
			t.Fatal(err)
		}
	}
	msgs := ts.received()
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(msgs))
	}
	var ids [2]string
	for i, r := range msgs {
		msg, err := mail.ReadMessage(strings.NewReader(string(r.data)))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = msg.Header.Get("Message-Id")
	}
	if ids[0] == "" || ids[0] != ids[1] {
		t.Errorf("Message-IDs of a re-send: %q and %q, want the same", ids[0], ids[1])
	}
}

func TestAlertMailText(t *testing.T) {
	base := smtpTestAlert()
	tests := []struct {
		name    string
		edit    func(*AlertMail)
		subject string
		body    []string
	}{
		{"live", func(*AlertMail) {}, "BTC is above 50,000 USD — Coinpulse alert #12", nil},
		{"sandbox", func(a *AlertMail) { a.Mode = coinpulse.ModeTest },
			"[Sandbox] BTC is above 50,000 USD — Coinpulse alert #12", []string{"[Sandbox]", "test-mode"}},
		{"below, small price", func(a *AlertMail) {
			a.Condition, a.CoinSymbol, a.TargetPrice, a.TriggeredPrice = coinpulse.Below, "shib", "0.00001234", "0.000012"
		}, "SHIB is below 0.00001234 USD — Coinpulse alert #12", []string{"Price:      0.000012 USD"}},
		{"no symbol", func(a *AlertMail) { a.CoinSymbol = "" },
			"bitcoin is above 50,000 USD — Coinpulse alert #12", []string{"Coin:       bitcoin\n"}},
		{"big decimal", func(a *AlertMail) { a.TargetPrice, a.TriggeredPrice = "1234567.891", "1234567.8910" },
			"BTC is above 1,234,567.891 USD — Coinpulse alert #12", []string{"Price:      1,234,567.8910 USD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := base
			tt.edit(&a)
			if err := a.check(); err != nil {
				t.Fatal(err)
			}
			if got := a.subject(); got != tt.subject {
				t.Errorf("subject %q, want %q", got, tt.subject)
			}
			text := a.text()
			for _, want := range tt.body {
				if !strings.Contains(text, want) {
					t.Errorf("body lacks %q:\n%s", want, text)
				}
			}
		})
	}
}

func TestSMTPGroupDigits(t *testing.T) {
	for in, want := range map[string]string{
		"0":           "0",
		"999":         "999",
		"1000":        "1,000",
		"50000":       "50,000",
		"123456":      "123,456",
		"1234567.891": "1,234,567.891",
		"-50000.5":    "-50,000.5",
		"0.00001234":  "0.00001234",
		"1e6":         "1e6",
		"12.":         "12.",
		".5":          ".5",
		"":            "",
		"abc":         "abc",
	} {
		if got := smtpGroupDigits(in); got != want {
			t.Errorf("smtpGroupDigits(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSendAlertAuthPlain(t *testing.T) {
	opts := smtpTestOptions{user: "alice", pass: "s3cret pass", insecureAuth: true}

	t.Run("right password", func(t *testing.T) {
		ts := startSMTPServer(t, opts)
		m := smtpTestMailer(t, ts, func(c *SMTPConfig) { c.Username, c.Password = "alice", "s3cret pass" })
		if err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert()); err != nil {
			t.Fatal(err)
		}
		if got := smtpOne(t, ts); got.authUser != "alice" {
			t.Errorf("authenticated as %q, want alice", got.authUser)
		}
		if got := ts.authTries(); len(got) != 1 || got[0] != "alice:s3cret pass" {
			t.Errorf("server saw credentials %q", got)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		ts := startSMTPServer(t, opts)
		m := smtpTestMailer(t, ts, func(c *SMTPConfig) { c.Username, c.Password = "alice", "wrong" })
		err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert())
		if err == nil || !strings.Contains(err.Error(), "535") {
			t.Fatalf("err %v, want a 535", err)
		}
		if !IsPermanent(err) {
			t.Errorf("IsPermanent(%v) = false, want true (5xx)", err)
		}
		if n := len(ts.received()); n != 0 {
			t.Errorf("%d messages delivered", n)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		ts := startSMTPServer(t, opts)
		m := smtpTestMailer(t, ts, nil)
		err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert())
		if err == nil || !strings.Contains(err.Error(), "authenticate") {
			t.Fatalf("err %v, want the server's refusal", err)
		}
		if n := len(ts.received()); n != 0 {
			t.Errorf("%d messages delivered", n)
		}
	})
}

func TestSendAlertStartTLS(t *testing.T) {
	tests := []struct {
		name     string
		server   smtpTestOptions
		edit     func(*SMTPConfig)
		wantErr  string // empty: delivered
		wantTLS  bool
		wantAuth string
	}{
		{
			name:    "mandatory without server STARTTLS",
			server:  smtpTestOptions{},
			edit:    func(c *SMTPConfig) { c.StartTLS = StartTLSMandatory },
			wantErr: "does not offer STARTTLS",
		},
		{
			name:    "mandatory (default) without server STARTTLS",
			server:  smtpTestOptions{},
			edit:    func(c *SMTPConfig) { c.StartTLS = "" },
			wantErr: "does not offer STARTTLS",
		},
		{
			name:    "mandatory",
			server:  smtpTestOptions{startTLS: true},
			edit:    func(c *SMTPConfig) { c.StartTLS, c.InsecureSkipVerify = StartTLSMandatory, true },
			wantTLS: true,
		},
		{
			name:    "mandatory verifies the certificate",
			server:  smtpTestOptions{startTLS: true},
			edit:    func(c *SMTPConfig) { c.StartTLS = StartTLSMandatory },
			wantErr: "certificate",
		},
		{
			name:   "mandatory with AUTH offered only after STARTTLS",
			server: smtpTestOptions{startTLS: true, user: "alice", pass: "pw"},
			edit: func(c *SMTPConfig) {
				c.StartTLS, c.InsecureSkipVerify, c.Username, c.Password = StartTLSMandatory, true, "alice", "pw"
			},
			wantTLS:  true,
			wantAuth: "alice",
		},
		{
			name:   "opportunistic without server STARTTLS",
			server: smtpTestOptions{},
			edit:   func(c *SMTPConfig) { c.StartTLS = StartTLSOpportunistic },
		},
		{
			name:    "opportunistic",
			server:  smtpTestOptions{startTLS: true},
			edit:    func(c *SMTPConfig) { c.StartTLS, c.InsecureSkipVerify = StartTLSOpportunistic, true },
			wantTLS: true,
		},
		{
			name:   "none with server STARTTLS",
			server: smtpTestOptions{startTLS: true},
			edit:   func(c *SMTPConfig) { c.StartTLS = StartTLSNone },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startSMTPServer(t, tt.server)
			m := smtpTestMailer(t, ts, tt.edit)
			err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one with %q", err, tt.wantErr)
				}
				if IsPermanent(err) {
					t.Errorf("IsPermanent(%v) = true, want false", err)
				}
				// The owner is told it is TLS, not that the server could
				// not be reached.
				if pub := PublicError(err); pub != "the connection to the mail server could not be secured (TLS)" {
					t.Errorf("PublicError(%v) = %q", err, pub)
				}
				if n := len(ts.received()); n != 0 {
					t.Errorf("%d messages delivered", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := smtpOne(t, ts)
			if got.tls != tt.wantTLS || got.authUser != tt.wantAuth {
				t.Errorf("tls %v, auth %q; want %v, %q", got.tls, got.authUser, tt.wantTLS, tt.wantAuth)
			}
		})
	}
}

func TestSendAlertImplicitTLS(t *testing.T) {
	ts := startSMTPServer(t, smtpTestOptions{implicitTLS: true, user: "alice", pass: "pw"})
	m := smtpTestMailer(t, ts, func(c *SMTPConfig) {
		c.TLS, c.InsecureSkipVerify, c.Username, c.Password = true, true, "alice", "pw"
		c.StartTLS = StartTLSMandatory // ignored with implicit TLS
	})
	if err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert()); err != nil {
		t.Fatal(err)
	}
	if got := smtpOne(t, ts); !got.tls || got.authUser != "alice" {
		t.Errorf("tls %v, auth %q; want true, alice", got.tls, got.authUser)
	}
}

// An implicit-TLS mailer whose server speaks plain SMTP, whose
// certificate does not verify, or that answers the handshake with an
// alert (a TLS version the mailer does not take: a review found such a
// remote error called "could not be reached") is told so.
func TestSendAlertImplicitTLSFailure(t *testing.T) {
	for _, tt := range []struct {
		name     string
		server   smtpTestOptions
		insecure bool
	}{
		{"plain server", smtpTestOptions{}, false},
		{"unverified certificate", smtpTestOptions{implicitTLS: true}, false},
		{"server on TLS 1.1", smtpTestOptions{implicitTLS: true, tlsMax: tls.VersionTLS11}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := startSMTPServer(t, tt.server)
			m := smtpTestMailer(t, ts, func(c *SMTPConfig) { c.TLS, c.InsecureSkipVerify = true, tt.insecure })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := m.SendAlert(ctx, "ada@example.com", smtpTestAlert())
			if err == nil {
				t.Fatal("delivered")
			}
			if IsPermanent(err) {
				t.Errorf("IsPermanent(%v) = true, want false", err)
			}
			if pub := PublicError(err); pub != "the connection to the mail server could not be secured (TLS)" {
				t.Errorf("PublicError(%v) = %q", err, pub)
			}
		})
	}
}

func TestSendAlertRejected(t *testing.T) {
	tests := []struct {
		name      string
		server    smtpTestOptions
		wantCode  string
		permanent bool
	}{
		{"RCPT 550", smtpTestOptions{rcptErr: &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "mailbox unavailable"}}, "550", true},
		{"RCPT 553", smtpTestOptions{rcptErr: &smtp.SMTPError{Code: 553, EnhancedCode: smtp.EnhancedCode{5, 1, 3}, Message: "bad address syntax"}}, "553", true},
		{"RCPT 450", smtpTestOptions{rcptErr: &smtp.SMTPError{Code: 450, EnhancedCode: smtp.EnhancedCode{4, 2, 1}, Message: "mailbox busy"}}, "450", false},
		{"RCPT 451", smtpTestOptions{rcptErr: &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}}, "451", false},
		{"DATA 554", smtpTestOptions{dataErr: &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "rejected as spam"}}, "554", true},
		{"DATA 452", smtpTestOptions{dataErr: &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 3, 1}, Message: "insufficient storage"}}, "452", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startSMTPServer(t, tt.server)
			m := smtpTestMailer(t, ts, nil)
			err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert())
			if err == nil || !strings.Contains(err.Error(), tt.wantCode) {
				t.Fatalf("err %v, want a %s", err, tt.wantCode)
			}
			if got := IsPermanent(err); got != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tt.permanent)
			}
			// The owner sees the server's reply, not its address.
			if pub := PublicError(err); !strings.Contains(pub, tt.wantCode) || strings.Contains(pub, "127.0.0.1") {
				t.Errorf("PublicError(%v) = %q, want the reply %s without the server's address", err, pub, tt.wantCode)
			}
		})
	}
}

// smtpClosedPort is a port of 127.0.0.1 on which nothing listens.
func smtpClosedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// smtpSilentServer accepts connections on 127.0.0.1 and never answers.
func smtpSilentServer(t *testing.T) *smtpTestServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return &smtpTestServer{host: "127.0.0.1", port: l.Addr().(*net.TCPAddr).Port}
}

func TestSendAlertNotListening(t *testing.T) {
	ts := &smtpTestServer{host: "127.0.0.1", port: smtpClosedPort(t)}
	m := smtpTestMailer(t, ts, nil)
	err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert())
	if err == nil {
		t.Fatal("sent to a closed port")
	}
	if want := fmt.Sprintf("127.0.0.1:%d", ts.port); !strings.Contains(err.Error(), want) {
		t.Errorf("err %q does not name %s", err, want)
	}
	if pub := PublicError(err); pub != "the mail server could not be reached" {
		t.Errorf("PublicError(%v) = %q", err, pub)
	}
	if IsPermanent(err) {
		t.Errorf("IsPermanent(%v) = true, want false", err)
	}
}

func TestSendAlertTimeout(t *testing.T) {
	ts := smtpSilentServer(t)
	m := smtpTestMailer(t, ts, func(c *SMTPConfig) { c.Timeout = 200 * time.Millisecond })
	start := time.Now()
	err := m.SendAlert(context.Background(), "ada@example.com", smtpTestAlert())
	if err == nil {
		t.Fatal("sent to a server that never greets")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v with a 200ms timeout", d)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("err %v is not a timeout", err)
	}
	if pub := PublicError(err); pub != "the mail server did not answer in time" {
		t.Errorf("PublicError(%v) = %q", err, pub)
	}
	if IsPermanent(err) {
		t.Errorf("IsPermanent(%v) = true, want false", err)
	}
}

func TestSendAlertContextCanceled(t *testing.T) {
	ts := smtpSilentServer(t)
	m := smtpTestMailer(t, ts, func(c *SMTPConfig) { c.Timeout = 10 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := m.SendAlert(ctx, "ada@example.com", smtpTestAlert())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v after a 200ms context deadline", d)
	}
	if IsPermanent(err) {
		t.Errorf("IsPermanent(%v) = true, want false", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := m.SendAlert(ctx, "ada@example.com", smtpTestAlert()); !errors.Is(err, context.Canceled) {
		t.Errorf("with a canceled context: err %v, want context.Canceled", err)
	}
}

func TestSendAlertBadInput(t *testing.T) {
	ts := startSMTPServer(t, smtpTestOptions{})
	m := smtpTestMailer(t, ts, nil)
	for _, to := range []string{"", "not an address", "ada@example.com, bob@example.com", "ada@example.com\r\nBcc: eve@example.com"} {
		err := m.SendAlert(context.Background(), to, smtpTestAlert())
		if !errors.Is(err, ErrInvalidAddress) || !IsPermanent(err) {
			t.Errorf("to %q: err %v, want a permanent ErrInvalidAddress", to, err)
		}
		if pub := PublicError(err); pub != "the account's e-mail address is not a valid recipient" {
			t.Errorf("to %q: PublicError = %q", to, pub)
		}
	}
	for name, edit := range map[string]func(*AlertMail){
		"no coin":          func(a *AlertMail) { a.CoinID, a.CoinSymbol = "", "" },
		"no condition":     func(a *AlertMail) { a.Condition = "" },
		"no target":        func(a *AlertMail) { a.TargetPrice = "" },
		"no price":         func(a *AlertMail) { a.TriggeredPrice = "" },
		"no trigger time":  func(a *AlertMail) { a.TriggeredAt = time.Time{} },
		"bogus condition:": func(a *AlertMail) { a.Condition = "sideways" },
	} {
		a := smtpTestAlert()
		edit(&a)
		err := m.SendAlert(context.Background(), "ada@example.com", a)
		if err == nil || !IsPermanent(err) {
			t.Errorf("%s: err %v, want a permanent error", name, err)
		}
	}
	if n := len(ts.received()); n != 0 {
		t.Errorf("%d messages delivered", n)
	}
}

func TestSendAlertConcurrent(t *testing.T) {
	ts := startSMTPServer(t, smtpTestOptions{user: "alice", pass: "pw", insecureAuth: true})
	m := smtpTestMailer(t, ts, func(c *SMTPConfig) { c.Username, c.Password = "alice", "pw" })
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			a := smtpTestAlert()
			a.AlertID = int64(i + 1)
			errs <- m.SendAlert(context.Background(), "ada@example.com", a)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := len(ts.received()); got != n {
		t.Errorf("%d messages delivered, want %d", got, n)
	}
}

func TestIsPermanent(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{fmt.Errorf("dial: %w", &textproto.Error{Code: 554, Msg: "no service"}), true},
		{fmt.Errorf("dial: %w", &textproto.Error{Code: 421, Msg: "closing"}), false},
		{fmt.Errorf("x: %w", ErrInvalidAddress), true},
		{fmt.Errorf("x: %w", context.Canceled), false},
		{errors.Join(context.DeadlineExceeded, &textproto.Error{Code: 550, Msg: "no"}), false},
	} {
		if got := IsPermanent(tt.err); got != tt.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestSMTPConfigValidate(t *testing.T) {
	valid := SMTPConfig{
		Host:     "smtp.example.com",
		Username: "alice",
		Password: "pw",
		From:     "Coinpulse <alerts@example.com>",
	}
	tests := []struct {
		name string
		edit func(*SMTPConfig)
		want []string // substrings of the error; none: valid
	}{
		{"valid", func(*SMTPConfig) {}, nil},
		{"off", func(c *SMTPConfig) { *c = SMTPConfig{} }, nil},
		{"off with defaults", func(c *SMTPConfig) { *c = SMTPConfig{Port: 587, StartTLS: "mandatory", Timeout: time.Second} }, nil},
		{"no auth", func(c *SMTPConfig) { c.Username, c.Password = "", "" }, nil},
		{"implicit TLS", func(c *SMTPConfig) { c.TLS, c.Port = true, 465 }, nil},
		{"bare From", func(c *SMTPConfig) { c.From = "alerts@example.com" }, nil},
		{"IPv6 host", func(c *SMTPConfig) { c.Host = "::1" }, nil},
		{"starttls upper case", func(c *SMTPConfig) { c.StartTLS = "Opportunistic" }, nil},
		{"none to localhost with password", func(c *SMTPConfig) { c.Host, c.StartTLS = "localhost", "none" }, nil},
		{"none with password over TLS", func(c *SMTPConfig) { c.TLS, c.StartTLS = true, "none" }, nil},

		{"From without host", func(c *SMTPConfig) { *c = SMTPConfig{From: "a@example.com", Username: "u"} },
			[]string{"--smtp-user and --smtp-from set but --smtp-host is not"}},
		// Without a host too, a value no config takes is refused, and
		// implicit TLS would go unused (an audit: all were taken).
		{"off with a bad port", func(c *SMTPConfig) { *c = SMTPConfig{Port: 99999} }, []string{"--smtp-port 99999"}},
		{"off with a bad starttls", func(c *SMTPConfig) { *c = SMTPConfig{StartTLS: "bogus"} }, []string{`--smtp-starttls "bogus"`}},
		{"off with implicit TLS", func(c *SMTPConfig) { *c = SMTPConfig{TLS: true} }, []string{"--smtp-tls set but --smtp-host is not"}},
		{"no From", func(c *SMTPConfig) { c.From = "" }, []string{"--smtp-from is required"}},
		{"bad From", func(c *SMTPConfig) { c.From = "alerts at example.com" }, []string{`--smtp-from "alerts at example.com"`}},
		{"host with port", func(c *SMTPConfig) { c.Host = "smtp.example.com:587" }, []string{"must not include a port", "--smtp-port"}},
		{"host with space", func(c *SMTPConfig) { c.Host = "smtp example" }, []string{"not a host name"}},
		{"port", func(c *SMTPConfig) { c.Port = 70000 }, []string{"--smtp-port 70000"}},
		{"negative port", func(c *SMTPConfig) { c.Port = -1 }, []string{"--smtp-port -1"}},
		{"user without password", func(c *SMTPConfig) { c.Password = "" }, []string{"--smtp-password-file"}},
		{"password without user", func(c *SMTPConfig) { c.Username = "" }, []string{"--smtp-user is not"}},
		{"starttls value", func(c *SMTPConfig) { c.StartTLS = "yes" }, []string{`--smtp-starttls "yes" must be mandatory, opportunistic or none`}},
		{"password in clear", func(c *SMTPConfig) { c.StartTLS = "none" }, []string{"unencrypted"}},
		{"timeout", func(c *SMTPConfig) { c.Timeout = -time.Second }, []string{"timeout -1s is negative"}},
		{"several at once", func(c *SMTPConfig) { c.From, c.Port = "", 0x10000 }, []string{"--smtp-from is required", "--smtp-port 65536"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestNewMailerDefaults(t *testing.T) {
	if _, err := NewMailer(SMTPConfig{}); err == nil || !strings.Contains(err.Error(), "--smtp-host") {
		t.Errorf("NewMailer without a host: %v", err)
	}
	if _, err := NewMailer(SMTPConfig{Host: "smtp.example.com"}); err == nil || !strings.Contains(err.Error(), "--smtp-from") {
		t.Errorf("NewMailer without From: %v", err)
	}
	for _, tt := range []struct {
		cfg      SMTPConfig
		wantAddr string
	}{
		{SMTPConfig{Host: "smtp.example.com", From: "a@example.com"}, "smtp.example.com:587"},
		{SMTPConfig{Host: "smtp.example.com", From: "a@example.com", TLS: true}, "smtp.example.com:465"},
		{SMTPConfig{Host: "::1", Port: 2525, From: "a@example.com"}, "[::1]:2525"},
	} {
		m, err := NewMailer(tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if m.addr != tt.wantAddr || m.cfg.Timeout != DefaultSMTPTimeout {
			t.Errorf("%+v: addr %s timeout %v, want %s %v", tt.cfg, m.addr, m.cfg.Timeout, tt.wantAddr, DefaultSMTPTimeout)
		}
	}
}

func TestReadPasswordFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"lf":        "s3cret pass\n",
		"crlf":      "s3cret pass\r\n",
		"no eol":    "s3cret pass",
		"two lines": "s3cret pass\n\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPasswordFile(path)
		if err != nil || got != "s3cret pass" {
			t.Errorf("%s: %q, %v; want %q", name, got, err, "s3cret pass")
		}
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPasswordFile(empty); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := ReadPasswordFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want os.ErrNotExist", err)
	}
}
