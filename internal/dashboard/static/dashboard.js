// Coinpulse dashboard: the new-key page's copy button, and its entry in
// the history; pages are not restored from the back-forward cache.
// Everything else works without JavaScript.
"use strict";
// A page restored from the back-forward cache would show what the server
// no longer shows: a key shown once, or the account after logging out
// (Chromium may keep even pages sent with Cache-Control: no-store). Ask
// the server again instead.
window.addEventListener("pageshow", function (e) {
  if (!e.persisted) {
    return;
  }
  // By GET, never by sending a form again: the pages that answer a form
  // post (a key created, or refused) stand at an address only a post
  // reaches, so they go to the dashboard.
  var path = window.location.pathname;
  if (path === "/user/api/keys" || path === "/user/api/logout") {
    path = "/user/api";
  }
  window.location.replace(path);
});
document.addEventListener("DOMContentLoaded", function () {
  var button = document.getElementById("copy-key");
  var key = document.getElementById("new-key");
  var status = document.getElementById("copy-status");
  if (!button || !key) {
    return;
  }
  // The page answers the form's POST: put the dashboard's address in its
  // place in the history, so that a reload shows the dashboard instead of
  // sending the form again, which would create a second key.
  if (window.history && typeof window.history.replaceState === "function") {
    window.history.replaceState(null, "", "/user/api");
  }
  button.hidden = false;
  function done(ok) {
    status.textContent = ok ? "Copied." : "Select the key and copy it.";
  }
  function fallback() {
    key.focus();
    key.select();
    var ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (e) {
      ok = false;
    }
    done(ok);
  }
  button.addEventListener("click", function () {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(key.value).then(function () { done(true); }, fallback);
    } else {
      fallback();
    }
  });
  key.addEventListener("focus", function () { key.select(); });
  // Nor is the key kept in the page once it is left.
  window.addEventListener("pagehide", function () {
    key.value = "";
    key.textContent = "";
  });
});
