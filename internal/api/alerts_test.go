package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/alerting"
)

// detailFields are the fields a VALIDATION_ERROR names, sorted.
func detailFields(res *response) []string {
	var fs []string
	for _, d := range res.Error.Details {
		fs = append(fs, d.Field)
		if d.Message == "" {
			fs = append(fs, "(no message for "+d.Field+")")
		}
	}
	slices.Sort(fs)
	return fs
}

// symbols returns a symbol that one coin alone has and one that several
// share (with the id the market resolves it to), from the current market.
func symbols(t *testing.T) (unshared, shared_, sharedID string) {
	t.Helper()
	snap := shared.engine.Current()
	count := map[string]int{}
	for _, c := range snap.Coins() {
		count[c.Symbol]++
	}
	for _, c := range snap.Coins() {
		if count[c.Symbol] > 1 && shared_ == "" {
			shared_ = c.Symbol
			d, _ := snap.Lookup(c.Symbol)
			sharedID = d.ID
		}
	}
	if count["btc"] != 1 || shared_ == "" {
		t.Fatalf("the sim market should have btc once and some shared symbol: btc×%d, shared %q", count["btc"], shared_)
	}
	return "btc", shared_, sharedID
}

func TestAlertCreate(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	key := env.newKey(coinpulse.TierPro)
	before := time.Now().UTC().Add(-time.Second)

	// By id, target as a JSON number; notify_email defaults to false.
	a := env.createAlert(key, `{"coin_id":"bitcoin","target_price":50000,"condition":"above"}`)
	if a.ID == 0 || a.CoinID != "bitcoin" || a.CoinSymbol != "btc" || a.TargetPrice != "50000" || a.Condition != "above" ||
		a.NotifyEmail || !a.IsActive || a.TriggeredAt != nil || a.TriggeredPrice != nil || a.EmailStatus != nil ||
		a.EmailError != nil || a.Mode != "live" {
		t.Errorf("created %+v", a)
	}
	if a.CreatedAt.Before(before) || a.CreatedAt.After(time.Now().Add(time.Second)) || !a.UpdatedAt.Equal(a.CreatedAt) {
		t.Errorf("created_at %s, updated_at %s", a.CreatedAt, a.UpdatedAt)
	}
	// The JSON carries null for what has not happened, and the target as
	// a JSON number.
	res := do(t, env.srv, "GET", fmt.Sprintf("/api/v1/alerts/%d", a.ID), key)
	for _, frag := range []string{`"target_price":50000,`, `"triggered_at":null`, `"triggered_price":null`, `"email_status":null`, `"notify_email":false`} {
		if !strings.Contains(string(res.Data), frag) {
			t.Errorf("GET /alerts/%d lacks %s: %s", a.ID, frag, res.Data)
		}
	}
	if got := env.getAlert(key, a.ID); !reflect.DeepEqual(got, a) {
		t.Errorf("GET = %+v, created %+v", got, a)
	}

	// By an unshared symbol, any case, with spaces; target as a decimal
	// string, kept exactly.
	unshared, sharedSym, sharedID := symbols(t)
	b := env.createAlert(key, `{"coin_id":"  `+strings.ToUpper(unshared)+` ","target_price":"0.000000012345678901","condition":"below","notify_email":true}`)
	if b.CoinID != "bitcoin" || b.CoinSymbol != "btc" || b.TargetPrice != "0.000000012345678901" || b.Condition != "below" || !b.NotifyEmail || b.EmailStatus != nil {
		t.Errorf("created by symbol %+v", b)
	}
	c := env.createAlert(key, `{"coin_id":"eth","target_price":"1234.5","condition":"above","notify_email":false}`)
	if c.CoinID != "ethereum" || c.CoinSymbol != "eth" || c.TargetPrice != "1234.5" || c.NotifyEmail {
		t.Errorf("created by eth %+v", c)
	}
	// A symbol several coins share must be given as an id.
	res = send(t, env.srv, "POST", "/api/v1/alerts", key, `{"coin_id":"`+sharedSym+`","target_price":1,"condition":"above"}`)
	wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	if f := detailFields(res); !slices.Equal(f, []string{"coin_id"}) || !strings.Contains(res.Error.Details[0].Message, sharedID) {
		t.Errorf("shared symbol %q: %v %s", sharedSym, f, res.Raw)
	}
	// null notify_email is the default.
	d := env.createAlert(key, `{"coin_id":"bitcoin","target_price":"1","condition":"below","notify_email":null}`)
	if d.NotifyEmail {
		t.Errorf("notify_email null made %+v", d)
	}

	list := want[[]jsonAlert](t, do(t, env.srv, "GET", "/api/v1/alerts", key), http.StatusOK)
	if len(list) != 4 || list[0].ID != a.ID || list[1].ID != b.ID || list[2].ID != c.ID || list[3].ID != d.ID {
		t.Errorf("list: %+v", list)
	}
}

func TestAlertValidation(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	key := env.newKey(coinpulse.TierPro)
	for _, tc := range []struct {
		body   string
		fields []string // nil: a body-level error without details
	}{
		{`{}`, []string{"coin_id", "condition", "target_price"}},
		{``, []string{"coin_id", "condition", "target_price"}},
		{`{"target_price":1,"condition":"above"}`, []string{"coin_id"}},
		{`{"coin_id":null,"target_price":1,"condition":"above"}`, []string{"coin_id"}},
		{`{"coin_id":"","target_price":1,"condition":"above"}`, []string{"coin_id"}},
		{`{"coin_id":"no-such-coin","target_price":1,"condition":"above"}`, []string{"coin_id"}},
		{`{"coin_id":42,"target_price":1,"condition":"above"}`, []string{"coin_id"}},
		{`{"coin_id":"bitcoin","condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":0,"condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":"0.000","condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":-0,"condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":-5,"condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":"-5","condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":"abc","condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":"1e5","condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":"00012.50","condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":true,"condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":[1],"condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":1e400,"condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":" 5","condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":0.0000000000000000001,"condition":"above"}`, []string{"target_price"}},
		{`{"coin_id":"bitcoin","target_price":1}`, []string{"condition"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"sideways"}`, []string{"condition"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"ABOVE"}`, []string{"condition"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":1}`, []string{"condition"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"above","notify_email":"true"}`, []string{"notify_email"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"above","notify_email":1}`, []string{"notify_email"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"above","notify_email":"yes"}`, []string{"notify_email"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"above","note":"x"}`, []string{"note"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"above","is_active":false}`, []string{"is_active"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"above","triggered_price":3}`, []string{"triggered_price"}},
		{`{"coin_id":"nope","target_price":0,"condition":"up","notify_email":"no","x":1}`, []string{"coin_id", "condition", "notify_email", "target_price", "x"}},
		{`{"coin_id":"bitcoin","target_price":1,"condition":"above"`, []string{"body"}},
		{`[{"coin_id":"bitcoin","target_price":1,"condition":"above"}]`, []string{"body"}},
		{`"bitcoin"`, []string{"body"}},
		{`null`, []string{"body"}},
	} {
		res := send(t, env.srv, "POST", "/api/v1/alerts", key, tc.body)
		if res.Status != http.StatusUnprocessableEntity || res.Error.Code != string(coinpulse.CodeValidation) || res.Error.Message == "" {
			t.Errorf("%s: %d %s, want 422 VALIDATION_ERROR\n%s", tc.body, res.Status, res.Error.Code, res.Raw)
			continue
		}
		if got := detailFields(res); !slices.Equal(got, tc.fields) {
			t.Errorf("%s: details name %v, want %v\n%s", tc.body, got, tc.fields, res.Raw)
		}
	}
	if list := want[[]jsonAlert](t, do(t, env.srv, "GET", "/api/v1/alerts", key), http.StatusOK); len(list) != 0 {
		t.Errorf("invalid bodies created %d alerts", len(list))
	}
	// Toggle takes no body fields.
	a := env.createAlert(key, `{"coin_id":"bitcoin","target_price":1,"condition":"above"}`)
	res := send(t, env.srv, "POST", fmt.Sprintf("/api/v1/alerts/%d/toggle", a.ID), key, `{"is_active":false}`)
	wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	if got := env.getAlert(key, a.ID); !got.IsActive {
		t.Errorf("a refused toggle changed the alert: %+v", got)
	}
}

func TestAlertListGetToggleDelete(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	key := env.newKey(coinpulse.TierPro)
	if res := do(t, env.srv, "GET", "/api/v1/alerts", key); res.Status != 200 || string(res.Data) != "[]" || fmt.Sprint(res.Meta["total"]) != "0" {
		t.Errorf("empty list: %d %s %v", res.Status, res.Data, res.Meta)
	}
	a := env.createAlert(key, `{"coin_id":"bitcoin","target_price":100000,"condition":"above"}`)
	b := env.createAlert(key, `{"coin_id":"ethereum","target_price":100,"condition":"below"}`)
	res := do(t, env.srv, "GET", "/v1/alerts", key)
	if list := want[[]jsonAlert](t, res, http.StatusOK); len(list) != 2 || !reflect.DeepEqual(list[0], a) || !reflect.DeepEqual(list[1], b) || fmt.Sprint(res.Meta["total"]) != "2" {
		t.Errorf("list %+v, meta %v", list, res.Meta)
	}
	for _, id := range []string{"999999", "0", "-1", "abc", "1.0", "01"} {
		wantError(t, do(t, env.srv, "GET", "/api/v1/alerts/"+id, key), http.StatusNotFound, coinpulse.CodeNotFound)
		wantError(t, send(t, env.srv, "POST", "/api/v1/alerts/"+id+"/toggle", key, ""), http.StatusNotFound, coinpulse.CodeNotFound)
		wantError(t, send(t, env.srv, "DELETE", "/api/v1/alerts/"+id, key, ""), http.StatusNotFound, coinpulse.CodeNotFound)
	}

	// Toggle off, then on: re-armed.
	off := want[jsonAlert](t, env.toggle(key, a.ID), http.StatusOK)
	if off.IsActive || off.ID != a.ID || off.TargetPrice != a.TargetPrice || off.UpdatedAt.Before(a.UpdatedAt) {
		t.Errorf("toggled off: %+v", off)
	}
	if got := env.getAlert(key, a.ID); got.IsActive {
		t.Errorf("GET after toggling off: %+v", got)
	}
	on := want[jsonAlert](t, env.toggle(key, a.ID), http.StatusOK)
	if !on.IsActive || on.TriggeredAt != nil || on.TriggeredPrice != nil {
		t.Errorf("toggled on: %+v", on)
	}

	// Delete.
	res = send(t, env.srv, "DELETE", fmt.Sprintf("/api/v1/alerts/%d", a.ID), key, "")
	if del := want[map[string]any](t, res, http.StatusOK); fmt.Sprint(del["id"]) != fmt.Sprint(a.ID) || del["deleted"] != true {
		t.Errorf("delete: %v", del)
	}
	wantError(t, do(t, env.srv, "GET", fmt.Sprintf("/api/v1/alerts/%d", a.ID), key), http.StatusNotFound, coinpulse.CodeNotFound)
	wantError(t, send(t, env.srv, "DELETE", fmt.Sprintf("/api/v1/alerts/%d", a.ID), key, ""), http.StatusNotFound, coinpulse.CodeNotFound)
	wantError(t, env.toggle(key, a.ID), http.StatusNotFound, coinpulse.CodeNotFound)
	if list := want[[]jsonAlert](t, do(t, env.srv, "GET", "/api/v1/alerts", key), http.StatusOK); len(list) != 1 || list[0].ID != b.ID {
		t.Errorf("list after delete: %+v", list)
	}
	// A deleted alert does not fire, even when its coin crosses.
	if fired := env.tick(map[string]float64{"bitcoin": 1e9, "ethereum": 50}); len(fired) != 1 || fired[0].ID != b.ID {
		t.Errorf("fired %+v, want only alert %d", fired, b.ID)
	}
	// Unknown methods are 405 with Allow.
	res = send(t, env.srv, "PUT", fmt.Sprintf("/api/v1/alerts/%d", b.ID), key, "{}")
	wantError(t, res, http.StatusMethodNotAllowed, coinpulse.CodeMethodNotAllowed)
}

// GET /alerts pages by cursor (limit, starting_after, meta.has_more) and
// filters by state (is_active); without them it lists every alert.
func TestAlertListPaging(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	key := env.newKey(coinpulse.TierPro)
	var all []int64
	for i := range 5 {
		all = append(all, env.createAlert(key, fmt.Sprintf(`{"coin_id":"bitcoin","target_price":%d,"condition":"above"}`, 1_000_000+i)).ID)
	}
	want[jsonAlert](t, env.toggle(key, all[1]), http.StatusOK) // off
	ids := func(res *response) []int64 {
		var out []int64
		for _, a := range want[[]jsonAlert](t, res, http.StatusOK) {
			out = append(out, a.ID)
		}
		return out
	}
	var paged []int64
	next := "/api/v1/alerts?limit=2"
	for range 5 {
		res := do(t, env.srv, "GET", next, key)
		page := ids(res)
		paged = append(paged, page...)
		if res.Meta["total"] != 5.0 {
			t.Errorf("%s: meta %v, want total 5", next, res.Meta)
		}
		if res.Meta["has_more"] != true {
			break
		}
		next = fmt.Sprintf("/api/v1/alerts?limit=2&starting_after=%d", page[len(page)-1])
	}
	if !slices.Equal(paged, all) {
		t.Errorf("paged through %v, want %v", paged, all)
	}
	res := do(t, env.srv, "GET", "/api/v1/alerts?is_active=false", key)
	if got := ids(res); !slices.Equal(got, all[1:2]) || res.Meta["total"] != 1.0 || res.Meta["has_more"] != false {
		t.Errorf("inactive: %v, meta %v; want [%d], total 1", got, res.Meta, all[1])
	}
	res = do(t, env.srv, "GET", fmt.Sprintf("/api/v1/alerts?is_active=true&starting_after=%d", all[1]), key)
	if got := ids(res); !slices.Equal(got, all[2:]) || res.Meta["total"] != 4.0 {
		t.Errorf("active after the inactive one: %v, meta %v; want %v, total 4", got, res.Meta, all[2:])
	}
	for _, q := range []string{"limit=0", "limit=1001", "is_active=yes", "starting_after=0", "starting_after=999999999", "page=1"} {
		res := do(t, env.srv, "GET", "/api/v1/alerts?"+q, key)
		wantError(t, res, http.StatusUnprocessableEntity, coinpulse.CodeValidation)
	}
}

func TestAlertOwnerScoping(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	ann := env.user(coinpulse.TierPro)
	annLive, annTest := env.key(ann, coinpulse.ModeLive, rw), env.key(ann, coinpulse.ModeTest, rw)
	bob := env.newKey(coinpulse.TierPro)

	a := env.createAlert(annLive, `{"coin_id":"bitcoin","target_price":1,"condition":"below"}`)
	path := fmt.Sprintf("/api/v1/alerts/%d", a.ID)
	// Another account, and Ann's own sandbox, see nothing of it.
	for name, key := range map[string]string{"bob": bob, "ann's sandbox": annTest} {
		wantError(t, do(t, env.srv, "GET", path, key), http.StatusNotFound, coinpulse.CodeNotFound)
		wantError(t, send(t, env.srv, "POST", path+"/toggle", key, ""), http.StatusNotFound, coinpulse.CodeNotFound)
		wantError(t, send(t, env.srv, "DELETE", path, key, ""), http.StatusNotFound, coinpulse.CodeNotFound)
		if list := want[[]jsonAlert](t, do(t, env.srv, "GET", "/api/v1/alerts", key), http.StatusOK); len(list) != 0 {
			t.Errorf("%s lists %+v", name, list)
		}
	}
	// The 404 of someone else's alert is the 404 of no alert.
	other := do(t, env.srv, "GET", path, bob)
	none := do(t, env.srv, "GET", "/api/v1/alerts/99999999", bob)
	if strings.Replace(other.Error.Message, fmt.Sprint(a.ID), "X", 1) != strings.Replace(none.Error.Message, "99999999", "X", 1) {
		t.Errorf("someone else's alert: %q; no alert: %q", other.Error.Message, none.Error.Message)
	}
	if got := env.getAlert(annLive, a.ID); !got.IsActive {
		t.Errorf("others' attempts changed the alert: %+v", got)
	}
	// The sandbox has alerts of its own, invisible to the live key.
	s := env.createAlert(annTest, `{"coin_id":"bitcoin","target_price":2,"condition":"below"}`)
	if s.Mode != "test" {
		t.Errorf("sandbox alert mode %q", s.Mode)
	}
	wantError(t, do(t, env.srv, "GET", fmt.Sprintf("/api/v1/alerts/%d", s.ID), annLive), http.StatusNotFound, coinpulse.CodeNotFound)
	live := want[[]jsonAlert](t, do(t, env.srv, "GET", "/api/v1/alerts", annLive), http.StatusOK)
	test := want[[]jsonAlert](t, do(t, env.srv, "GET", "/api/v1/alerts", annTest), http.StatusOK)
	if len(live) != 1 || live[0].ID != a.ID || len(test) != 1 || test[0].ID != s.ID {
		t.Errorf("live lists %+v, sandbox %+v", live, test)
	}
}

func TestAlertTierCap(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{plans: plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) {
		p.MaxActiveAlerts = 2
		p.PerSecond, p.PerMinute = 1_000_000, 1_000_000
	})})
	u := env.user(coinpulse.TierPremium)
	key, sandbox := env.key(u, coinpulse.ModeLive, rw), env.key(u, coinpulse.ModeTest, rw)
	body := `{"coin_id":"bitcoin","target_price":1000000000,"condition":"above"}`
	a := env.createAlert(key, body)
	b := env.createAlert(key, body)
	res := send(t, env.srv, "POST", "/api/v1/alerts", key, body)
	wantError(t, res, http.StatusForbidden, coinpulse.CodeAlertLimitReached)
	if !strings.Contains(res.Error.Message, "2") || !strings.Contains(res.Error.Message, "/user/api") {
		t.Errorf("limit message %q should say the cap and where to upgrade", res.Error.Message)
	}
	// Disabling one frees a slot...
	want[jsonAlert](t, env.toggle(key, a.ID), http.StatusOK)
	c := env.createAlert(key, body)
	// ...and re-enabling it past the cap is refused, leaving it disabled.
	wantError(t, env.toggle(key, a.ID), http.StatusForbidden, coinpulse.CodeAlertLimitReached)
	if got := env.getAlert(key, a.ID); got.IsActive {
		t.Errorf("re-enabled past the cap: %+v", got)
	}
	// Deleting one frees a slot too.
	want[map[string]any](t, send(t, env.srv, "DELETE", fmt.Sprintf("/api/v1/alerts/%d", c.ID), key, ""), http.StatusOK)
	want[jsonAlert](t, env.toggle(key, a.ID), http.StatusOK)
	wantError(t, send(t, env.srv, "POST", "/api/v1/alerts", key, body), http.StatusForbidden, coinpulse.CodeAlertLimitReached)
	// A fired alert is no longer active: it frees its slot.
	if fired := env.tick(map[string]float64{"bitcoin": 2e9}); len(fired) != 2 {
		t.Fatalf("fired %d alerts, want 2 (%d and %d)", len(fired), a.ID, b.ID)
	}
	env.createAlert(key, body)
	env.createAlert(key, body)
	wantError(t, send(t, env.srv, "POST", "/api/v1/alerts", key, body), http.StatusForbidden, coinpulse.CodeAlertLimitReached)
	// The cap applies to each mode on its own (as the message says, "per
	// mode"): the sandbox has its own two.
	env.createAlert(sandbox, body)
	env.createAlert(sandbox, body)
	wantError(t, send(t, env.srv, "POST", "/api/v1/alerts", sandbox, body), http.StatusForbidden, coinpulse.CodeAlertLimitReached)
}

func TestAlertPermissions(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{plans: plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) { p.MaxActiveAlerts = 0 })})
	body := `{"coin_id":"bitcoin","target_price":1,"condition":"above"}`
	free := env.newKey(coinpulse.TierFree)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/alerts", body}, {"GET", "/api/v1/alerts", ""}, {"GET", "/api/v1/alerts/1", ""},
		{"POST", "/api/v1/alerts/1/toggle", ""}, {"DELETE", "/api/v1/alerts/1", ""},
	} {
		res := send(t, env.srv, c.method, c.path, free, c.body)
		wantError(t, res, http.StatusForbidden, coinpulse.CodePermissionDenied)
		if !strings.Contains(res.Error.Message, "/user/api") || !strings.Contains(res.Error.Message, "free") {
			t.Errorf("free tier %s %s: %q should name the tier and /user/api", c.method, c.path, res.Error.Message)
		}
	}
	// A read-only key reads alerts but cannot create, toggle or delete.
	pro := env.user(coinpulse.TierPro)
	rwKey, ro := env.key(pro, coinpulse.ModeLive, rw), env.key(pro, coinpulse.ModeLive, coinpulse.Permissions{Read: true})
	a := env.createAlert(rwKey, body)
	wantError(t, send(t, env.srv, "POST", "/api/v1/alerts", ro, body), http.StatusForbidden, coinpulse.CodePermissionDenied)
	wantError(t, env.toggle(ro, a.ID), http.StatusForbidden, coinpulse.CodePermissionDenied)
	wantError(t, send(t, env.srv, "DELETE", fmt.Sprintf("/api/v1/alerts/%d", a.ID), ro, ""), http.StatusForbidden, coinpulse.CodePermissionDenied)
	if got := env.getAlert(ro, a.ID); !reflect.DeepEqual(got, a) {
		t.Errorf("read-only GET: %+v", got)
	}
	if list := want[[]jsonAlert](t, do(t, env.srv, "GET", "/api/v1/alerts", ro), http.StatusOK); len(list) != 1 {
		t.Errorf("read-only list: %+v", list)
	}
	// A write-only key cannot list.
	wo := env.key(pro, coinpulse.ModeLive, coinpulse.Permissions{Write: true})
	wantError(t, do(t, env.srv, "GET", "/api/v1/alerts", wo), http.StatusForbidden, coinpulse.CodePermissionDenied)
	// A plan with every endpoint but no alerts (max_active_alerts 0).
	res := send(t, env.srv, "POST", "/api/v1/alerts", env.newKey(coinpulse.TierPremium), body)
	wantError(t, res, http.StatusForbidden, coinpulse.CodeAlertLimitReached)
}

// An alert fires once per arming, when a price is strictly past its target.
func TestAlertFiring(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{clock: newFakeClock()})
	key := env.newKey(coinpulse.TierPro)
	up := env.createAlert(key, `{"coin_id":"bitcoin","target_price":"50000","condition":"above"}`)
	down := env.createAlert(key, `{"coin_id":"ethereum","target_price":"2000.5","condition":"below"}`)
	off := env.createAlert(key, `{"coin_id":"bitcoin","target_price":"1","condition":"above"}`)
	want[jsonAlert](t, env.toggle(key, off.ID), http.StatusOK)

	// Equal to the target, or on the wrong side: nothing fires.
	for _, prices := range []map[string]float64{
		{"bitcoin": 50000, "ethereum": 2000.5},
		{"bitcoin": 49999.99, "ethereum": 2000.51},
	} {
		if fired := env.tick(prices); len(fired) != 0 {
			t.Fatalf("prices %v fired %+v", prices, fired)
		}
	}
	for _, a := range []jsonAlert{up, down} {
		if got := env.getAlert(key, a.ID); !got.IsActive || got.TriggeredAt != nil {
			t.Fatalf("alert %d after prices at or short of its target: %+v", a.ID, got)
		}
	}

	// Strictly above: fires, once.
	env.clock.Advance(time.Second)
	at := env.now()
	fired := env.tick(map[string]float64{"bitcoin": 50000.01, "ethereum": 2000.5})
	if len(fired) != 1 || fired[0].ID != up.ID {
		t.Fatalf("fired %+v, want alert %d only", fired, up.ID)
	}
	got := env.getAlert(key, up.ID)
	if got.IsActive || got.TriggeredAt == nil || !got.TriggeredAt.Equal(at.Truncate(time.Microsecond)) || got.TriggeredPrice == nil || *got.TriggeredPrice != "50000.01" {
		t.Fatalf("fired alert: %+v (triggered at %v, price %v); want the tick's time %s and price 50000.01", got, got.TriggeredAt, got.TriggeredPrice, at)
	}
	if got.NotifyEmail || got.EmailStatus != nil || got.EmailError != nil {
		t.Errorf("an alert without e-mail has email_status %v, email_error %v", got.EmailStatus, got.EmailError)
	}
	// Further crossings change nothing.
	for _, p := range []float64{60000, 50000.02, 1e9} {
		if fired := env.tick(map[string]float64{"bitcoin": p}); len(fired) != 0 {
			t.Fatalf("bitcoin at %v fired again: %+v", p, fired)
		}
	}
	if again := env.getAlert(key, up.ID); !reflect.DeepEqual(again, got) {
		t.Errorf("after more ticks: %+v, was %+v", again, got)
	}
	// Below: strictly below fires.
	if fired := env.tick(map[string]float64{"ethereum": 2000.49}); len(fired) != 1 || fired[0].ID != down.ID {
		t.Fatalf("ethereum at 2000.49 fired %+v, want alert %d", fired, down.ID)
	}
	if got := env.getAlert(key, down.ID); got.IsActive || got.TriggeredPrice == nil || *got.TriggeredPrice != "2000.49" {
		t.Errorf("below alert: %+v", got)
	}
	if got := env.getAlert(key, off.ID); got.IsActive || got.TriggeredAt != nil {
		t.Errorf("the disabled alert fired: %+v", got)
	}

	// Re-enabling re-arms and clears the trigger...
	env.clock.Advance(time.Second)
	re := want[jsonAlert](t, env.toggle(key, up.ID), http.StatusOK)
	if !re.IsActive || re.TriggeredAt != nil || re.TriggeredPrice != nil || re.CreatedAt != up.CreatedAt {
		t.Fatalf("re-enabled: %+v", re)
	}
	if res := do(t, env.srv, "GET", fmt.Sprintf("/api/v1/alerts/%d", up.ID), key); !strings.Contains(string(res.Data), `"triggered_at":null,"triggered_price":null`) {
		t.Errorf("re-enabled alert JSON: %s", res.Data)
	}
	// ...and it fires again, at the next crossing only.
	if fired := env.tick(map[string]float64{"bitcoin": 50000}); len(fired) != 0 {
		t.Fatalf("re-armed alert fired at its target: %+v", fired)
	}
	env.clock.Advance(time.Second)
	at2 := env.now()
	if fired := env.tick(map[string]float64{"bitcoin": 51234.5}); len(fired) != 1 || fired[0].ID != up.ID {
		t.Fatalf("re-armed alert: fired %+v", fired)
	}
	got2 := env.getAlert(key, up.ID)
	if got2.IsActive || got2.TriggeredAt == nil || !got2.TriggeredAt.Equal(at2.Truncate(time.Microsecond)) || got2.TriggeredPrice == nil || *got2.TriggeredPrice != "51234.5" {
		t.Errorf("second firing: %+v", got2)
	}
	// OnFire (what serve announces to WebSockets and the dispatcher) saw
	// each firing once.
	if ids := env.firedIDs(); !slices.Equal(ids, []int64{up.ID, down.ID, up.ID}) {
		t.Errorf("announced firings %v, want [%d %d %d]", ids, up.ID, down.ID, up.ID)
	}
}

// Several evaluators (nodes) over one store fire an arming once: when
// both see the crossing, the second sees it fired by the first (same
// trigger, no second set of deliveries). An evaluator that was not told of
// an alert finds it in the store.
func TestAlertFiresOnceAcrossEvaluators(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{allowPrivate: true})
	key := env.newKey(coinpulse.TierPro)
	hook := env.createWebhook(key, "http://127.0.0.1:9/hook") // never attempted: no dispatcher
	a := env.createAlert(key, `{"coin_id":"bitcoin","target_price":100,"condition":"above"}`)

	// A second node's evaluator: it learns of the alert from the store
	// (the API told only the first).
	second := alerting.NewEvaluator(alerting.EvaluatorConfig{Store: env.store, Event: AlertEvent, Log: quiet, Entitled: env.srv.Entitlement})
	var secondSaw []int64
	second.SetOnFire(func(fired []coinpulse.Alert) {
		for _, f := range fired {
			secondSaw = append(secondSaw, f.ID)
		}
	})
	if f, err := second.Evaluate(env.ctx, env.snapshot(map[string]float64{"bitcoin": 99})); err != nil || len(f) != 0 {
		t.Fatalf("second node at 99: %v, %+v", err, f)
	}
	snap := env.snapshot(map[string]float64{"bitcoin": 101})
	f1, err := env.ev.Evaluate(env.ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := second.Evaluate(env.ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(f1) != 1 || len(f2) != 1 || f1[0].ID != a.ID || f2[0].ID != a.ID || !f1[0].TriggeredAt.Equal(*f2[0].TriggeredAt) || f1[0].ArmedSeq != f2[0].ArmedSeq {
		t.Fatalf("first node fired %+v, second %+v; want alert %d seen fired by both, once", f1, f2, a.ID)
	}
	if ds := env.deliveries(key, hook.ID); len(ds) != 1 || ds[0].AlertID == nil || *ds[0].AlertID != a.ID || ds[0].Status != "pending" {
		t.Errorf("deliveries %+v, want one for alert %d", ds, a.ID)
	}
	// A later crossing, on either node, does nothing more.
	if f := env.tick(map[string]float64{"bitcoin": 300}); len(f) != 0 {
		t.Errorf("first node fired again: %+v", f)
	}
	if f, _ := second.Evaluate(env.ctx, env.snapshot(map[string]float64{"bitcoin": 200})); len(f) != 0 {
		t.Errorf("second node fired again: %+v", f)
	}

	// The other way round: the node that was not told fires it, from the
	// store, and the one that was told then sees it fired.
	b := env.createAlert(key, `{"coin_id":"bitcoin","target_price":1000,"condition":"above"}`)
	snap = env.snapshot(map[string]float64{"bitcoin": 1001})
	f2, err = second.Evaluate(env.ctx, snap)
	if err != nil || len(f2) != 1 || f2[0].ID != b.ID {
		t.Fatalf("second node: %v, %+v; want alert %d fired", err, f2, b.ID)
	}
	f1, err = env.ev.Evaluate(env.ctx, snap)
	if err != nil || len(f1) != 1 || f1[0].ID != b.ID || !f1[0].TriggeredAt.Equal(*f2[0].TriggeredAt) {
		t.Fatalf("first node: %v, %+v; want alert %d seen fired", err, f1, b.ID)
	}
	if ds := env.deliveries(key, hook.ID); len(ds) != 2 {
		t.Errorf("%d deliveries, want 2 (one per firing)", len(ds))
	}
	if !slices.Equal(secondSaw, []int64{a.ID, b.ID}) || !slices.Equal(env.firedIDs(), []int64{a.ID, b.ID}) {
		t.Errorf("announced: second node %v, first %v", secondSaw, env.firedIDs())
	}
}

// validAlertBody says, independently of the handler, whether POST /alerts
// must accept body, and what it asks for.
func validAlertBody(body []byte) (coinID string, target decimal.Decimal, cond string, email bool, ok bool) {
	raw := bytes.TrimSpace(body)
	if len(raw) == 0 || raw[0] != '{' {
		return
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return
	}
	for name := range fields {
		switch name {
		case "coin_id", "target_price", "condition", "notify_email":
		default:
			return
		}
	}
	present := func(name string) (json.RawMessage, bool) {
		v, ok := fields[name]
		return v, ok && string(v) != "null"
	}
	// coin_id: a string naming a coin by id, or by a symbol no other coin
	// has.
	v, found := present("coin_id")
	var name string
	if !found || json.Unmarshal(v, &name) != nil {
		return
	}
	name = strings.TrimSpace(name)
	if n := utf8.RuneCountInString(name); n < 1 || n > 100 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f }) {
		return
	}
	snap := shared.engine.Current()
	if c := snap.Coin(name); c != nil {
		coinID = c.ID
	} else if d, known := snap.Lookup(name); known && (len(d.Alternatives) == 0 || d.ResolvedBy != "symbol") {
		coinID = d.ID
	} else {
		return
	}
	// target_price: a JSON number, or a string holding one, > 0, under
	// 10^15, with at most 18 decimal places.
	v, found = present("target_price")
	if !found {
		return
	}
	s := string(v)
	if v[0] == '"' && json.Unmarshal(v, &s) != nil {
		return
	}
	if len(s) > 64 || !alertNumber.MatchString(s) {
		return
	}
	d, err := decimal.NewFromString(s)
	if err != nil || !d.IsPositive() || d.Cmp(decimal.New(1, 15)) >= 0 || !d.Truncate(18).Equal(d) {
		return
	}
	target = d
	// condition: exactly above or below.
	v, found = present("condition")
	if !found || json.Unmarshal(v, &cond) != nil || (cond != "above" && cond != "below") {
		return
	}
	// notify_email: true, false, null or absent.
	if v, found := present("notify_email"); found {
		switch string(v) {
		case "true":
			email = true
		case "false":
		default:
			return
		}
	}
	return coinID, target, cond, email, true
}

// alertNumber is a non-negative JSON number with an exponent of at most
// three digits.
var alertNumber = regexp.MustCompile(`^(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]{1,3})?$`)

// FuzzAlertBodies sends arbitrary bodies to POST /alerts: the answer is
// always the JSON envelope with 201 or 422 (413 past the size limit),
// never a 500, and 201 exactly for the valid bodies, with the alert they
// describe.
func FuzzAlertBodies(f *testing.F) {
	for _, s := range []string{
		`{"coin_id":"bitcoin","target_price":50000,"condition":"above"}`,
		`{"coin_id":"ETH","target_price":"1234.5","condition":"below","notify_email":true}`,
		`{"coin_id":" btc ","target_price":"0.000000000000000001","condition":"above","notify_email":null}`,
		`{"coin_id":"bitcoin","target_price":999999999999999.999999999999999999,"condition":"below"}`,
		`{"coin_id":"bitcoin","target_price":1e15,"condition":"above"}`,
		`{"coin_id":"bitcoin","target_price":1E-3,"condition":"above","notify_email":false}`,
		`{"coin_id":"bitcoin","target_price":0,"condition":"above"}`,
		`{"coin_id":"bitcoin","target_price":-0,"condition":"above"}`,
		`{"coin_id":"bitcoin","target_price":"-1","condition":"above"}`,
		`{"coin_id":"bitcoin","target_price":1e1000,"condition":"above"}`,
		`{"coin_id":"bitcoin","target_price":"1\u0000","condition":"above"}`,
		`{"coin_id":"bitcoin","target_price":1,"condition":"Above"}`,
		`{"coin_id":"bitcoin","target_price":1,"condition":"above","notify_email":"true"}`,
		`{"coin_id":"bitcoin","target_price":1,"condition":"above","extra":{}}`,
		`{"coin_id":"bitcoin","coin_id":"nope","target_price":1,"condition":"above"}`,
		`{"coin_id":null,"target_price":{},"condition":[]}`,
		`{"coin_id":"bit\ncoin","target_price":1,"condition":"above"}`,
		`{"coin_id":"\u0062tc","target_price":"\u0031","condition":"\u0061bove"}`,
		`{"target_price":1`,
		`[]`,
		``,
		`   {}   `,
		"{\"coin_id\":\"\xff\",\"target_price\":1,\"condition\":\"above\"}",
	} {
		f.Add(s)
	}
	env := newAlertEnv(f, alertEnvOptions{})
	u := env.user(coinpulse.TierEnterprise)
	key, owner := env.key(u, coinpulse.ModeLive, rw), coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "/api/v1/alerts", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		env.srv.Handler().ServeHTTP(rec, req)
		var envl struct {
			Success *bool `json:"success"`
			Data    *struct {
				ID          int64       `json:"id"`
				CoinID      string      `json:"coin_id"`
				TargetPrice json.Number `json:"target_price"`
				Condition   string      `json:"condition"`
				NotifyEmail bool        `json:"notify_email"`
				IsActive    bool        `json:"is_active"`
			} `json:"data"`
			Error *struct {
				Code    string                 `json:"code"`
				Message string                 `json:"message"`
				Details []coinpulse.FieldError `json:"details"`
			} `json:"error"`
			Meta struct {
				RequestID string `json:"request_id"`
			} `json:"meta"`
		}
		dec := json.NewDecoder(rec.Body)
		dec.UseNumber()
		if err := dec.Decode(&envl); err != nil || envl.Success == nil || *envl.Success != (rec.Code == 201) || envl.Meta.RequestID == "" ||
			(rec.Code == 201) != (envl.Data != nil) || (rec.Code != 201) != (envl.Error != nil) {
			t.Fatalf("POST /alerts %q = %d: not an envelope (%v)", body, rec.Code, err)
		}
		coinID, target, cond, email, valid := validAlertBody([]byte(body))
		switch rec.Code {
		case 201:
			if !valid {
				t.Fatalf("POST /alerts %q = 201 for an invalid body", body)
			}
			a := envl.Data
			got, err := decimal.NewFromString(a.TargetPrice.String())
			if a.ID == 0 || a.CoinID != coinID || err != nil || !got.Equal(target) || a.Condition != cond || a.NotifyEmail != email || !a.IsActive {
				t.Fatalf("POST /alerts %q created %+v; want %s %s %s email %v", body, a, coinID, cond, target, email)
			}
			if err := env.store.DeleteAlert(env.ctx, owner, a.ID); err != nil {
				t.Fatal(err)
			}
		case 422:
			if valid {
				t.Fatalf("POST /alerts %q = 422 for a valid body: %+v", body, envl.Error)
			}
			if envl.Error.Code != string(coinpulse.CodeValidation) || envl.Error.Message == "" {
				t.Fatalf("POST /alerts %q: error %+v", body, envl.Error)
			}
			for _, d := range envl.Error.Details { // (a field may be named "": {"":1})
				if d.Message == "" {
					t.Fatalf("POST /alerts %q: detail %+v", body, d)
				}
			}
		case 413:
			if len(body) <= 64<<10 {
				t.Fatalf("POST /alerts of %d bytes = 413", len(body))
			}
		default:
			t.Fatalf("POST /alerts %q = %d: %+v", body, rec.Code, envl.Error)
		}
	})
}
