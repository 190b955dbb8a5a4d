// In the popup flow (SPEC §4.1), closing the popup on the login or consent page tells the
// opener that the authorization was canceled, posted to the origin the server named (the
// client's registered redirect URL's). Submitting a form — logging in, Authorize, Deny,
// switching account — is not closing it: the next page takes over.
(function () {
  var element = document.querySelector('[data-canceled]');
  if (!element || !window.opener) return;
  var leaving = false;
  document.addEventListener('submit', function () { leaving = true; });
  window.addEventListener('pagehide', function () {
    if (!leaving) window.opener.postMessage(JSON.parse(element.dataset.canceled), element.dataset.origin);
  });
})();
