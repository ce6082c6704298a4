// Coinpulse dashboard: the copy button of the new-key page. Everything
// else works without JavaScript.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var button = document.getElementById("copy-key");
  var key = document.getElementById("new-key");
  var status = document.getElementById("copy-status");
  if (!button || !key) {
    return;
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
});
