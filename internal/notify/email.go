package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"

	"coinpulse"
)

// SMTP defaults applied by NewMailer to the zero values of SMTPConfig.
const (
	DefaultSMTPPort    = 587              // submission with STARTTLS
	DefaultSMTPTLSPort = 465              // submission with implicit TLS
	DefaultSMTPTimeout = 10 * time.Second // per connection phase
)

// The values of SMTPConfig.StartTLS.
const (
	StartTLSMandatory     = "mandatory"     // upgrade with STARTTLS or fail
	StartTLSOpportunistic = "opportunistic" // upgrade when the server offers STARTTLS
	StartTLSNone          = "none"          // never upgrade
)

// SMTPConfig is how alert e-mail reaches its SMTP server (a submission
// server or relay). The zero value, with no Host, means e-mail is not
// configured. Operators set it with --smtp-host, --smtp-port, --smtp-user,
// --smtp-password-file, --smtp-from and --smtp-starttls.
type SMTPConfig struct {
	// Host is the server's host name or IP address, without a port.
	Host string
	// Port is the server's TCP port: DefaultSMTPPort (587) when zero, or
	// DefaultSMTPTLSPort (465) when zero and TLS is set.
	Port int
	// Username and Password authenticate with SMTP AUTH: PLAIN if the
	// server offers it, else LOGIN, else a SCRAM, NTLM or CRAM-MD5
	// mechanism it offers. Both empty: no authentication. PLAIN and LOGIN
	// send the password only over TLS, or to localhost, 127.0.0.1 or ::1.
	Username string
	Password string
	// From is the sender address of the messages, with or without a
	// display name ("Coinpulse <alerts@example.com>"). Required when Host
	// is set; its address is also the envelope sender.
	From string
	// StartTLS is StartTLSMandatory, StartTLSOpportunistic or
	// StartTLSNone; empty means StartTLSMandatory. It is ignored when TLS
	// is set.
	StartTLS string
	// TLS connects with implicit TLS (SMTPS, usually port 465) instead of
	// upgrading a plain connection with STARTTLS.
	TLS bool
	// Timeout bounds connecting, and then each step of the SMTP
	// conversation; zero means DefaultSMTPTimeout.
	Timeout time.Duration
	// InsecureSkipVerify accepts any server certificate. For tests only.
	InsecureSkipVerify bool
}

// Validate reports every problem of c at once, naming the flags to fix. A
// config without Host is valid (e-mail off) unless it sets a user, a
// password, a sender or implicit TLS, which would be silently unused, or a
// value no config takes (a port, a STARTTLS mode): a typo is told at once,
// not when a host is added.
func (c SMTPConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("smtp config: "+format, args...))
	}
	if c.Port < 0 || c.Port > 65535 {
		bad("--smtp-port %d is not a TCP port (1-65535)", c.Port)
	}
	policy, ok := smtpTLSPolicy(c.StartTLS)
	if !ok {
		bad("--smtp-starttls %q must be %s, %s or %s", c.StartTLS, StartTLSMandatory, StartTLSOpportunistic, StartTLSNone)
	}
	if c.Timeout < 0 {
		bad("timeout %v is negative", c.Timeout)
	}
	if c.Host == "" {
		var set []string
		if c.Username != "" {
			set = append(set, "--smtp-user")
		}
		if c.Password != "" {
			set = append(set, "--smtp-password-file")
		}
		if c.From != "" {
			set = append(set, "--smtp-from")
		}
		if c.TLS {
			set = append(set, "--smtp-tls")
		}
		if len(set) > 0 {
			bad("%s set but --smtp-host is not; set --smtp-host to send alert e-mail", strings.Join(set, " and "))
		}
		return errors.Join(errs...)
	}

	if strings.ContainsAny(c.Host, " \t\r\n/") {
		bad("--smtp-host %q is not a host name", c.Host)
	} else if strings.Contains(c.Host, ":") && net.ParseIP(c.Host) == nil {
		bad("--smtp-host %q must not include a port; set the port with --smtp-port", c.Host)
	}
	switch {
	case c.Username != "" && c.Password == "":
		bad("--smtp-user is set but the password is empty; set --smtp-password-file")
	case c.Username == "" && c.Password != "":
		bad("--smtp-password-file sets a password but --smtp-user is not set")
	}
	if c.From == "" {
		bad("--smtp-from is required when --smtp-host is set")
	} else if _, err := mail.ParseAddress(c.From); err != nil {
		bad("--smtp-from %q is not an e-mail address: %v", c.From, err)
	}
	if ok && policy == gomail.NoTLS && !c.TLS && c.Username != "" && !smtpLoopback(c.Host) {
		bad("--smtp-starttls=none would send the password of --smtp-user unencrypted to %s; use %s, or implicit TLS", c.Host, StartTLSMandatory)
	}
	return errors.Join(errs...)
}

// ReadPasswordFile returns the content of the file at path (as given to
// --smtp-password-file) without its trailing newline ("\n" or "\r\n"). An
// empty password is an error.
func ReadPasswordFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the SMTP password file: %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("the SMTP password file %s is empty", path)
	}
	return pw, nil
}

// smtpTLSPolicy maps SMTPConfig.StartTLS (case-insensitive, empty meaning
// mandatory) to go-mail's policy.
func smtpTLSPolicy(s string) (gomail.TLSPolicy, bool) {
	switch strings.ToLower(s) {
	case "", StartTLSMandatory:
		return gomail.TLSMandatory, true
	case StartTLSOpportunistic:
		return gomail.TLSOpportunistic, true
	case StartTLSNone:
		return gomail.NoTLS, true
	}
	return 0, false
}

// smtpLoopback reports whether host names this machine, to which go-mail
// sends passwords without TLS.
func smtpLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// Mailer sends alert e-mail through one SMTP server. Each SendAlert opens
// its own connection, so a Mailer is safe for concurrent use.
type Mailer struct {
	cfg      SMTPConfig // defaults applied
	addr     string     // host:port
	from     *mail.Address
	policy   gomail.TLSPolicy
	tls      *tls.Config
	helo     string
	idDomain string // right side of Message-IDs
}

// Port is the SMTP server's port, the default of the TLS mode when the
// config left it 0.
func (m *Mailer) Port() int { return m.cfg.Port }

// NewMailer validates cfg, which must have a Host, and returns its Mailer.
// It does not connect.
func NewMailer(cfg SMTPConfig) (*Mailer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Host == "" {
		return nil, errors.New("smtp config: --smtp-host is not set")
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultSMTPPort
		if cfg.TLS {
			cfg.Port = DefaultSMTPTLSPort
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultSMTPTimeout
	}
	policy, _ := smtpTLSPolicy(cfg.StartTLS)
	from, _ := mail.ParseAddress(cfg.From) // checked by Validate
	helo, err := os.Hostname()
	if err != nil || helo == "" {
		helo = "localhost"
	}
	idDomain := from.Address[strings.LastIndexByte(from.Address, '@')+1:]
	if !smtpDotAtom(idDomain) {
		idDomain = "coinpulse.invalid"
	}
	return &Mailer{
		cfg:    cfg,
		addr:   net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)),
		from:   from,
		policy: policy,
		tls: &tls.Config{
			ServerName:         cfg.Host,
			MinVersion:         tls.VersionTLS12,
			InsecureSkipVerify: cfg.InsecureSkipVerify, // tests only
		},
		helo:     helo,
		idDomain: idDomain,
	}, nil
}

// AlertMail is what an alert e-mail says: the alert, the crossing that
// fired it, and the event it belongs to.
type AlertMail struct {
	// AlertID is the alert's id, shown as "#12".
	AlertID int64
	// EventID is the firing's event id ("msg_…"), the same in every
	// attempt. It becomes the X-Coinpulse-Event-Id header and the left side
	// of the Message-ID, so that a re-sent message can be recognized as
	// the same one. Empty: a random Message-ID.
	EventID string
	// Mode is the alert's owner's mode; coinpulse.ModeTest messages say
	// "[Sandbox]" in their subject and body.
	Mode coinpulse.Mode
	// CoinID ("bitcoin") and CoinSymbol ("btc", shown upper case); at
	// least one is required.
	CoinID     string
	CoinSymbol string
	// Condition is the alert's direction.
	Condition coinpulse.Condition
	// TargetPrice and TriggeredPrice are USD prices as exact decimal
	// strings ("50000", "50123.45"). Plain decimals are shown with a comma
	// between groups of three integer digits; anything else as given.
	TargetPrice    string
	TriggeredPrice string
	// TriggeredAt is when the price crossed, shown in UTC.
	TriggeredAt time.Time
}

// ErrInvalidAddress is the error, wrapped, of SendAlert for a recipient
// that is not an e-mail address. It is permanent.
var ErrInvalidAddress = errors.New("invalid recipient e-mail address")

// smtpInputError is a SendAlert argument that no retry can fix.
type smtpInputError struct{ err error }

func (e *smtpInputError) Error() string { return e.err.Error() }
func (e *smtpInputError) Unwrap() error { return e.err }

// SendAlert sends the alert e-mail a to the address to, over a new
// connection: the server is dialled, STARTTLS and AUTH are done as
// configured, and the message is handed over. It returns nil once the
// server has accepted the message. Cancelling ctx aborts the attempt, at
// any step. Use IsPermanent on an error to choose between retrying and
// giving up.
func (m *Mailer) SendAlert(ctx context.Context, to string, a AlertMail) error {
	msg, err := m.alertMessage(to, a, time.Now())
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	// Dial ourselves: to close the connection when ctx is done (go-mail
	// only watches ctx while dialling), and to join an IPv6 host and port
	// correctly.
	var stop func() bool
	dial := func(dctx context.Context, network, _ string) (net.Conn, error) {
		var conn net.Conn
		var err error
		d := &net.Dialer{}
		if m.cfg.TLS {
			td := &tls.Dialer{NetDialer: d, Config: m.tls}
			conn, err = td.DialContext(dctx, network, m.addr)
		} else {
			conn, err = d.DialContext(dctx, network, m.addr)
		}
		if err != nil {
			return nil, err
		}
		stop = context.AfterFunc(ctx, func() { conn.Close() })
		return conn, nil
	}
	opts := []gomail.Option{
		gomail.WithPort(m.cfg.Port),
		gomail.WithTimeout(m.cfg.Timeout),
		gomail.WithHELO(m.helo),
		gomail.WithTLSConfig(m.tls),
		gomail.WithTLSPolicy(m.policy),
		gomail.WithDialContextFunc(dial),
	}
	if m.cfg.TLS {
		opts = append(opts, gomail.WithSSL())
	}
	if m.cfg.Username != "" {
		opts = append(opts,
			gomail.WithOpportunisticSMTPAuth(gomail.SMTPAuthPlain, gomail.SMTPAuthLogin),
			gomail.WithUsername(m.cfg.Username),
			gomail.WithPassword(m.cfg.Password),
		)
	}
	// A Client per message: go-mail's Client changes its own auth settings
	// while authenticating, which concurrent sends must not share.
	client, err := gomail.NewClient(m.cfg.Host, opts...)
	if err != nil {
		return fmt.Errorf("smtp %s: %w", m.addr, err)
	}
	err = client.DialAndSendWithContext(ctx, msg)
	if stop != nil {
		stop()
	}
	if msg.IsDelivered() {
		// Accepted; a failing RSET or QUIT afterwards changes nothing.
		return nil
	}
	if err == nil {
		return fmt.Errorf("smtp %s: the message was not accepted", m.addr)
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("smtp %s: %w (%v)", m.addr, cerr, err)
	}
	if m.policy == gomail.TLSMandatory && !m.cfg.TLS && strings.Contains(err.Error(), "does not support STARTTLS") {
		return fmt.Errorf("smtp %s: %w, which --smtp-starttls=%s requires "+
			"(use implicit TLS, or --smtp-starttls=%s or %s for a trusted relay): %v",
			m.addr, errNoStartTLS, StartTLSMandatory, StartTLSOpportunistic, StartTLSNone, err)
	}
	return fmt.Errorf("smtp %s: %w", m.addr, err)
}

// alertMessage builds the message of a to to, dated now.
func (m *Mailer) alertMessage(to string, a AlertMail, now time.Time) (*gomail.Msg, error) {
	rcpt, err := mail.ParseAddress(to)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidAddress, to, err)
	}
	if err := a.check(); err != nil {
		return nil, &smtpInputError{err}
	}

	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	msg.FromMailAddress(m.from)
	msg.ToMailAddress(rcpt)
	msg.Subject(a.subject())
	msg.SetDateWithValue(now)
	if a.EventID != "" {
		if smtpDotAtom(a.EventID) {
			msg.SetMessageIDWithValue(a.EventID + "@" + m.idDomain)
		} else {
			msg.SetMessageID()
		}
		msg.SetGenHeader("X-Coinpulse-Event-Id", a.EventID)
	} else {
		msg.SetMessageID()
	}
	msg.SetGenHeader("X-Coinpulse-Alert-Id", strconv.FormatInt(a.AlertID, 10))
	// RFC 3834: no vacation replies to a notification.
	msg.SetGenHeader("Auto-Submitted", "auto-generated")
	msg.SetBodyString(gomail.TypeTextPlain, a.text())
	return msg, nil
}

// check reports what a lacks to make a message.
func (a AlertMail) check() error {
	switch {
	case a.CoinID == "" && a.CoinSymbol == "":
		return errors.New("alert e-mail: no coin id or symbol")
	case !a.Condition.Valid():
		return fmt.Errorf("alert e-mail: unknown condition %q", a.Condition)
	case a.TargetPrice == "":
		return errors.New("alert e-mail: no target price")
	case a.TriggeredPrice == "":
		return errors.New("alert e-mail: no triggered price")
	case a.TriggeredAt.IsZero():
		return errors.New("alert e-mail: no trigger time")
	}
	return nil
}

// coin is how the message names the coin: "BTC", else the coin id.
func (a AlertMail) coin() string {
	if a.CoinSymbol != "" {
		return strings.ToUpper(a.CoinSymbol)
	}
	return a.CoinID
}

// subject is "BTC is above 50,000 USD — Coinpulse alert #12", after
// "[Sandbox] " in test mode.
func (a AlertMail) subject() string {
	s := fmt.Sprintf("%s is %s %s USD — Coinpulse alert #%d",
		a.coin(), a.Condition, smtpGroupDigits(a.TargetPrice), a.AlertID)
	if a.Mode == coinpulse.ModeTest {
		s = "[Sandbox] " + s
	}
	return s
}

// text is the plain-text body.
func (a AlertMail) text() string {
	var b strings.Builder
	if a.Mode == coinpulse.ModeTest {
		b.WriteString("[Sandbox] This alert belongs to your test-mode (sandbox) data.\n\n")
	}
	coin := a.coin()
	if a.CoinSymbol != "" && a.CoinID != "" {
		coin += " (" + a.CoinID + ")"
	}
	fmt.Fprintf(&b, "Your Coinpulse price alert #%d has fired: %s is %s %s USD.\n\n",
		a.AlertID, a.coin(), a.Condition, smtpGroupDigits(a.TargetPrice))
	fmt.Fprintf(&b, "Coin:       %s\n", coin)
	fmt.Fprintf(&b, "Condition:  price %s %s USD\n", a.Condition, smtpGroupDigits(a.TargetPrice))
	fmt.Fprintf(&b, "Price:      %s USD\n", smtpGroupDigits(a.TriggeredPrice))
	fmt.Fprintf(&b, "Triggered:  %s\n", a.TriggeredAt.UTC().Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(&b, "Alert:      #%d\n", a.AlertID)
	b.WriteString("\nThe alert will not fire again until you re-enable it.\n")
	if a.EventID != "" {
		fmt.Fprintf(&b, "\n-- \nCoinpulse, event %s\n", a.EventID)
	}
	return b.String()
}

// smtpGroupDigits puts a comma between groups of three digits of the
// integer part of a plain decimal ("-1234567.891" → "-1,234,567.891") and
// returns anything else unchanged.
func smtpGroupDigits(s string) string {
	sign, rest := "", s
	if strings.HasPrefix(rest, "-") {
		sign, rest = "-", rest[1:]
	}
	intPart, frac, hasFrac := strings.Cut(rest, ".")
	if !smtpDigits(intPart) || (hasFrac && !smtpDigits(frac)) {
		return s
	}
	var b strings.Builder
	b.WriteString(sign)
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if hasFrac {
		b.WriteString("." + frac)
	}
	return b.String()
}

// smtpDigits reports whether s is one or more ASCII digits.
func smtpDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// smtpDotAtom reports whether s can stand on either side of a Message-ID's
// "@" unquoted: dot-separated runs of letters, digits, '_', '-' and '+'.
func smtpDotAtom(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '_' || c == '-' || c == '+') {
			return false
		}
	}
	return true
}

// PublicError is what a failed send shows the alert's owner
// (email_error): the mail server's reply when it refused the message or
// the connection, else the kind of failure; never the mail server's
// address nor the node's sockets, which are the operator's (the
// dispatcher logs the whole error).
func PublicError(err error) string {
	var (
		ie *smtpInputError
		se *gomail.SendError
		te *textproto.Error
	)
	switch {
	case errors.Is(err, ErrInvalidAddress):
		return "the account's e-mail address is not a valid recipient"
	case errors.As(err, &ie):
		return "the message could not be built: " + ie.err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "the mail server did not answer in time"
	case errors.As(err, &se) && se.ErrorCode() != 0:
		return "the mail server refused the message: " + se.Error()
	case errors.As(err, &te):
		return fmt.Sprintf("the mail server refused the connection: %d %s", te.Code, te.Msg)
	case isTLSFailure(err):
		return "the connection to the mail server could not be secured (TLS)"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "the mail server did not answer in time"
	}
	return "the mail server could not be reached"
}

// errNoStartTLS is the failure of a server that does not offer STARTTLS
// when --smtp-starttls=mandatory requires it.
var errNoStartTLS = errors.New("the server does not offer STARTTLS")

// isTLSFailure reports whether err is a failure to secure the connection:
// no STARTTLS where it is required, a certificate that does not verify, a
// TLS alert either side sent (a version or cipher the other does not take;
// crypto/tls returns those over TCP as a net.OpError of Op "remote error"
// or "local error"), or a server that does not speak TLS where implicit
// TLS was asked for. (Temporary: the operator can fix the configuration,
// or the server, while the e-mail waits.)
func isTLSFailure(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		re tls.RecordHeaderError
		oe *net.OpError
	)
	return errors.Is(err, errNoStartTLS) || errors.As(err, &cv) || errors.As(err, &re) ||
		errors.As(err, &oe) && (oe.Op == "remote error" || oe.Op == "local error")
}

// IsPermanent reports whether err, from SendAlert, is a failure that
// retrying will not fix: a recipient that is not an address, an AlertMail
// that cannot make a message, or a 5xx SMTP reply (550 mailbox unavailable,
// 554 rejected, and also 535 authentication failed and 5xx refusals of the
// server's configuration). Connection errors, timeouts, TLS failures,
// cancellation and 4xx replies are temporary. nil is not permanent.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrInvalidAddress) {
		return true
	}
	var ie *smtpInputError
	if errors.As(err, &ie) {
		return true
	}
	var se *gomail.SendError
	if errors.As(err, &se) {
		if se.Reason == gomail.ErrGetSender || se.Reason == gomail.ErrGetRcpts {
			return true
		}
		if code := se.ErrorCode(); code != 0 {
			return code >= 500 && code <= 599
		}
	}
	// Replies during the dial: greeting, EHLO, STARTTLS, AUTH.
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code >= 500 && te.Code <= 599
	}
	return false
}
