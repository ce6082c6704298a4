package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"coinpulse"
)

// A public address, literal so that registration resolves no name.
const publicHook = "https://93.184.215.14/hooks/coinpulse"

func TestWebhookCreateAndList(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	key := env.newKey(coinpulse.TierPremium)
	before := time.Now().UTC().Add(-time.Second)
	res := send(t, env.srv, "POST", "/api/v1/webhooks", key, `{"url":"`+publicHook+`","description":"  my endpoint  "}`)
	w := want[jsonWebhook](t, res, http.StatusCreated)
	if w.ID == 0 || w.URL != publicHook || !slices.Equal(w.Events, []string{"alert.triggered"}) || w.Description != "my endpoint" ||
		!w.Enabled || w.DisabledReason != nil || w.Mode != "live" || w.CreatedAt.Before(before) {
		t.Errorf("created %+v", w)
	}
	// The secret: whsec_ and the standard base64 of 24 to 64 bytes, which
	// the Standard Webhooks library accepts.
	raw, ok := strings.CutPrefix(w.Secret, "whsec_")
	key32, err := base64.StdEncoding.DecodeString(raw)
	if !ok || err != nil || len(key32) < 24 || len(key32) > 64 {
		t.Errorf("secret %q: %v", w.Secret, err)
	}
	if _, err := standardwebhooks.NewWebhook(w.Secret); err != nil {
		t.Errorf("the library refuses the secret: %v", err)
	}
	// Shown once: neither the list nor anything else shows it again.
	res = do(t, env.srv, "GET", "/api/v1/webhooks", key)
	list := want[[]jsonWebhook](t, res, http.StatusOK)
	if len(list) != 1 || list[0].ID != w.ID || list[0].Secret != "" || strings.Contains(string(res.Raw), "secret") ||
		strings.Contains(string(res.Raw), raw) || fmt.Sprint(res.Meta["total"]) != "1" {
		t.Errorf("list shows %s", res.Raw)
	}
	res = do(t, env.srv, "GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries", w.ID), key)
	if ds := want[[]jsonDelivery](t, res, http.StatusOK); len(ds) != 0 || strings.Contains(string(res.Raw), raw) {
		t.Errorf("deliveries of a new endpoint: %s", res.Raw)
	}
	// Two endpoints get two secrets.
	w2 := env.createWebhook(key, publicHook)
	if w2.Secret == w.Secret || w2.Secret == "" {
		t.Errorf("second secret %q, first %q", w2.Secret, w.Secret)
	}
	// events: duplicates dropped; an explicit list kept.
	w3 := want[jsonWebhook](t, send(t, env.srv, "POST", "/api/v1/webhooks", key,
		`{"url":"`+publicHook+`","events":["alert.triggered","alert.triggered"]}`), http.StatusCreated)
	if !slices.Equal(w3.Events, []string{"alert.triggered"}) {
		t.Errorf("events %v", w3.Events)
	}
	// A sandbox key has endpoints of its own.
	sandbox := env.key(env.user(coinpulse.TierPremium), coinpulse.ModeTest, rw)
	ws := env.createWebhook(sandbox, publicHook)
	if ws.Mode != "test" {
		t.Errorf("sandbox endpoint mode %q", ws.Mode)
	}
	if l := want[[]jsonWebhook](t, do(t, env.srv, "GET", "/api/v1/webhooks", sandbox), http.StatusOK); len(l) != 1 || l[0].ID != ws.ID {
		t.Errorf("sandbox lists %+v", l)
	}
}

func TestWebhookValidation(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	key := env.newKey(coinpulse.TierPremium)
	for _, tc := range []struct {
		body, field, says string
	}{
		{`{"url":"http://127.0.0.1:8080/hook"}`, "url", "loopback"},
		{`{"url":"http://127.1.2.3/hook"}`, "url", "loopback"},
		{`{"url":"http://[::1]/hook"}`, "url", "loopback"},
		{`{"url":"http://localhost:8080/hook"}`, "url", "loopback"}, // resolved: 127.0.0.1 or ::1
		{`{"url":"http://10.1.2.3/hook"}`, "url", "private"},
		{`{"url":"http://192.168.0.10/hook"}`, "url", "private"},
		{`{"url":"http://169.254.169.254/latest/meta-data"}`, "url", "metadata"},
		{`{"url":"http://169.254.1.1/"}`, "url", "link-local"},
		{`{"url":"http://[::ffff:127.0.0.1]/"}`, "url", "loopback"},
		{`{"url":"http://2130706433/"}`, "url", "IPv4"},
		{`{"url":"ftp://93.184.215.14/hook"}`, "url", "scheme"},
		{`{"url":"93.184.215.14/hook"}`, "url", "http"},
		{`{"url":"https://user:pw@93.184.215.14/"}`, "url", "password"},
		{`{"url":"https://93.184.215.14:99999/"}`, "url", "port"},
		{`{"url":""}`, "url", "1 to"},
		{`{"url":42}`, "url", "string"},
		{`{}`, "url", "required"},
		{`{"url":"` + publicHook + `","events":["alert.fired"]}`, "events", "unknown event type"},
		{`{"url":"` + publicHook + `","events":["webhook.test"]}`, "events", "unknown event type"},
		{`{"url":"` + publicHook + `","events":[]}`, "events", "non-empty"},
		{`{"url":"` + publicHook + `","events":"alert.triggered"}`, "events", "array"},
		{`{"url":"` + publicHook + `","events":[1]}`, "events", "array"},
		{`{"url":"` + publicHook + `","events":[null]}`, "events", "array of event types"},
		{`{"url":"` + publicHook + `","url":"` + publicHook + `"}`, "url", "more than once"},
		{`{"url":"` + publicHook + `","description":"` + strings.Repeat("d", 501) + `"}`, "description", "500"},
		{`{"url":"` + publicHook + `","secret":"whsec_mine"}`, "secret", "unknown field"},
	} {
		res := send(t, env.srv, "POST", "/api/v1/webhooks", key, tc.body)
		if res.Status != http.StatusUnprocessableEntity || res.Error.Code != string(coinpulse.CodeValidation) {
			t.Errorf("%.80s: %d %s, want 422\n%s", tc.body, res.Status, res.Error.Code, res.Raw)
			continue
		}
		if len(res.Error.Details) != 1 || res.Error.Details[0].Field != tc.field || !strings.Contains(res.Error.Details[0].Message, tc.says) {
			t.Errorf("%.80s: details %+v, want field %s saying %q", tc.body, res.Error.Details, tc.field, tc.says)
		}
	}
	if l := want[[]jsonWebhook](t, do(t, env.srv, "GET", "/api/v1/webhooks", key), http.StatusOK); len(l) != 0 {
		t.Errorf("refused bodies created %+v", l)
	}
}

// With --webhook-allow-private, loopback endpoints (the tests' own) are
// allowed.
func TestWebhookAllowPrivate(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{allowPrivate: true})
	key := env.newKey(coinpulse.TierPremium)
	for _, url := range []string{"http://127.0.0.1:8080/hook", "http://[::1]:9/x", "http://10.0.0.1/", "http://localhost:1234/"} {
		if w := env.createWebhook(key, url); w.URL != url || !w.Enabled {
			t.Errorf("%s: %+v", url, w)
		}
	}
	// Other checks still apply.
	wantError(t, send(t, env.srv, "POST", "/api/v1/webhooks", key, `{"url":"ftp://127.0.0.1/"}`), http.StatusUnprocessableEntity, coinpulse.CodeValidation)
}

func TestWebhookDeleteAndLimit(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{})
	u := env.user(coinpulse.TierPro)
	key, sandbox := env.key(u, coinpulse.ModeLive, rw), env.key(u, coinpulse.ModeTest, rw)
	other := env.newKey(coinpulse.TierPro)
	var ids []int64
	for range coinpulse.MaxWebhooks {
		ids = append(ids, env.createWebhook(key, publicHook).ID)
	}
	res := send(t, env.srv, "POST", "/api/v1/webhooks", key, `{"url":"`+publicHook+`"}`)
	wantError(t, res, http.StatusConflict, coinpulse.CodeConflict)
	if !strings.Contains(res.Error.Message, "10") {
		t.Errorf("limit message %q", res.Error.Message)
	}
	// The sandbox has its own ten.
	env.createWebhook(sandbox, publicHook)
	// Someone else's endpoint is not found, and stays.
	path := fmt.Sprintf("/api/v1/webhooks/%d", ids[3])
	for _, k := range []string{other, sandbox} {
		wantError(t, send(t, env.srv, "DELETE", path, k, ""), http.StatusNotFound, coinpulse.CodeNotFound)
		wantError(t, send(t, env.srv, "POST", path+"/test", k, ""), http.StatusNotFound, coinpulse.CodeNotFound)
		wantError(t, do(t, env.srv, "GET", path+"/deliveries", k), http.StatusNotFound, coinpulse.CodeNotFound)
	}
	del := want[map[string]any](t, send(t, env.srv, "DELETE", path, key, ""), http.StatusOK)
	if fmt.Sprint(del["id"]) != fmt.Sprint(ids[3]) || del["deleted"] != true {
		t.Errorf("delete: %v", del)
	}
	wantError(t, send(t, env.srv, "DELETE", path, key, ""), http.StatusNotFound, coinpulse.CodeNotFound)
	wantError(t, do(t, env.srv, "GET", path+"/deliveries", key), http.StatusNotFound, coinpulse.CodeNotFound)
	wantError(t, send(t, env.srv, "POST", path+"/test", key, ""), http.StatusNotFound, coinpulse.CodeNotFound)
	for _, bad := range []string{"0", "x", "-1", "99999"} {
		wantError(t, send(t, env.srv, "DELETE", "/api/v1/webhooks/"+bad, key, ""), http.StatusNotFound, coinpulse.CodeNotFound)
	}
	list := want[[]jsonWebhook](t, do(t, env.srv, "GET", "/api/v1/webhooks", key), http.StatusOK)
	if len(list) != coinpulse.MaxWebhooks-1 || slices.ContainsFunc(list, func(w jsonWebhook) bool { return w.ID == ids[3] }) {
		t.Errorf("list after delete: %d endpoints", len(list))
	}
	// A slot is free again.
	env.createWebhook(key, publicHook)
	wantError(t, send(t, env.srv, "POST", "/api/v1/webhooks", key, `{"url":"`+publicHook+`"}`), http.StatusConflict, coinpulse.CodeConflict)
}

func TestWebhookPlans(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{plans: plansWith(coinpulse.TierPremium, func(p *coinpulse.Plan) { p.Webhooks = false })})
	for name, key := range map[string]string{
		"free":                  env.newKey(coinpulse.TierFree),
		"premium without hooks": env.newKey(coinpulse.TierPremium),
	} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/api/v1/webhooks", ""}, {"POST", "/api/v1/webhooks", `{"url":"` + publicHook + `"}`},
			{"DELETE", "/api/v1/webhooks/1", ""}, {"POST", "/api/v1/webhooks/1/test", ""}, {"GET", "/api/v1/webhooks/1/deliveries", ""},
		} {
			res := send(t, env.srv, c.method, c.path, key, c.body)
			wantError(t, res, http.StatusForbidden, coinpulse.CodePermissionDenied)
			if !strings.Contains(res.Error.Message, "/user/api") {
				t.Errorf("%s %s %s: %q should say where to upgrade", name, c.method, c.path, res.Error.Message)
			}
		}
	}
	// Alerts stay open to that premium plan; only webhooks are closed.
	env.createAlert(env.newKey(coinpulse.TierPremium), `{"coin_id":"bitcoin","target_price":1,"condition":"above"}`)
	// A read-only key lists, but cannot create, delete or test.
	pro := env.user(coinpulse.TierPro)
	rwKey, ro := env.key(pro, coinpulse.ModeLive, rw), env.key(pro, coinpulse.ModeLive, coinpulse.Permissions{Read: true})
	w := env.createWebhook(rwKey, publicHook)
	wantError(t, send(t, env.srv, "POST", "/api/v1/webhooks", ro, `{"url":"`+publicHook+`"}`), http.StatusForbidden, coinpulse.CodePermissionDenied)
	wantError(t, send(t, env.srv, "DELETE", fmt.Sprintf("/api/v1/webhooks/%d", w.ID), ro, ""), http.StatusForbidden, coinpulse.CodePermissionDenied)
	wantError(t, send(t, env.srv, "POST", fmt.Sprintf("/api/v1/webhooks/%d/test", w.ID), ro, ""), http.StatusForbidden, coinpulse.CodePermissionDenied)
	if l := want[[]jsonWebhook](t, do(t, env.srv, "GET", "/api/v1/webhooks", ro), http.StatusOK); len(l) != 1 {
		t.Errorf("read-only list: %+v", l)
	}
	want[[]jsonDelivery](t, do(t, env.srv, "GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries", w.ID), ro), http.StatusOK)
}

// POST /webhooks/{id}/test queues a webhook.test event that a real
// dispatcher delivers to a real receiver, signed as Standard Webhooks, and
// the delivery log shows it delivered.
func TestWebhookTestEvent(t *testing.T) {
	t.Parallel()
	env := newAlertEnv(t, alertEnvOptions{allowPrivate: true, dispatch: true})
	rc := newHookReceiver(t, nil)
	key := env.newKey(coinpulse.TierPremium)
	w := env.createWebhook(key, rc.url())
	path := fmt.Sprintf("/api/v1/webhooks/%d", w.ID)
	wantError(t, send(t, env.srv, "POST", path+"/test", key, `{"event":"x"}`), http.StatusUnprocessableEntity, coinpulse.CodeValidation)

	res := send(t, env.srv, "POST", path+"/test", key, "")
	queued := want[jsonDelivery](t, res, http.StatusAccepted)
	if !strings.HasPrefix(queued.EventID, "msg_") || queued.EventType != "webhook.test" || queued.Status != "pending" ||
		queued.Attempts != 0 || queued.AlertID != nil || queued.NextAttemptAt == nil {
		t.Errorf("queued %+v", queued)
	}

	hits := rc.wait(t, 1)
	h := hits[0]
	verifier, err := standardwebhooks.NewWebhook(w.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifier.Verify(h.Body, h.Header); err != nil {
		t.Errorf("the library does not verify the delivery: %v\n%v", err, h.Header)
	}
	if h.Header.Get("webhook-id") != queued.EventID || h.Header.Get("Content-Type") != "application/json" || h.Header.Get("User-Agent") != "Coinpulse-Webhooks/1" {
		t.Errorf("headers %v, want webhook-id %s", h.Header, queued.EventID)
	}
	body := jsonObject(t, h.Body)
	data, _ := body["data"].(map[string]any)
	if body["type"] != "webhook.test" || data == nil || fmt.Sprint(data["webhook_id"]) != fmt.Sprint(w.ID) || data["message"] == "" {
		t.Errorf("payload %s", h.Body)
	}
	if ts, err := time.Parse(time.RFC3339, fmt.Sprint(body["timestamp"])); err != nil || time.Since(ts) > time.Minute {
		t.Errorf("payload timestamp %v: %v", body["timestamp"], err)
	}

	d := env.waitDelivery(key, w.ID, "delivered", func(d jsonDelivery) bool { return d.Status == "delivered" })
	if d.ID != queued.ID || d.EventID != queued.EventID || d.Attempts != 1 || d.LastStatusCode == nil || *d.LastStatusCode != 200 ||
		d.LastError != nil || d.DeliveredAt == nil || d.NextAttemptAt != nil || d.LastAttemptAt == nil {
		t.Errorf("delivered: %+v", d)
	}
	var logged, sent any
	json.Unmarshal(d.Payload, &logged)
	json.Unmarshal(h.Body, &sent)
	if fmt.Sprint(logged) != fmt.Sprint(sent) {
		t.Errorf("the log's payload %s differs from the one sent %s", d.Payload, h.Body)
	}
	if len(rc.got()) != 1 {
		t.Errorf("the receiver got %d requests, want 1", len(rc.got()))
	}
}
