// In the popup flow, closing the consent popup without deciding tells the opener that the
// authorization was canceled. Submitting the form (either button) does not.
(function () {
  var form = document.getElementById('consent');
  if (!form || !window.opener) return;
  var decided = false;
  form.addEventListener('submit', function () { decided = true; });
  window.addEventListener('pagehide', function () {
    if (!decided) window.opener.postMessage(JSON.parse(form.dataset.canceled), form.dataset.origin);
  });
})();
