// Posts the authorization response to the window that opened this popup, to the origin of
// the client's registered redirect URL only, then closes the popup (SPEC §4.1).
(function () {
  var element = document.getElementById('web-message');
  if (window.opener && element) {
    window.opener.postMessage(JSON.parse(element.dataset.message), element.dataset.origin);
  }
  window.close();
})();
