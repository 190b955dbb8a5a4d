// In the popup flow (SPEC §4.1), closing the popup on the login or consent page tells the
// opener that the authorization was canceled, posted to the origin the server named (the
// client's registered redirect URL's). Submitting a form — logging in, Authorize, Deny,
// switching account, logging in with a passkey — is not closing it: the next page takes over.
//
// Chromium runs only `beforeunload` handlers when a window is closed (a closing renderer
// may be ended before `pagehide`); mobile browsers may skip `beforeunload` but fire
// `pagehide`. Listening to both, the message is posted once.
(function () {
  var element = document.querySelector('[data-canceled]');
  if (!element || !window.opener) return;
  var done = false;
  document.addEventListener('submit', function () {
    done = true;
  });
  document.addEventListener('gatehouse:leaving', function () {
    done = true;
  }); // a passkey login (passkeys.js)
  function cancel() {
    if (done) return;
    done = true;
    window.opener.postMessage(JSON.parse(element.dataset.canceled), element.dataset.origin);
  }
  window.addEventListener('beforeunload', cancel);
  window.addEventListener('pagehide', cancel);
})();
