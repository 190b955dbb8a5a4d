// Copy buttons on the page showing a client ID and secret: each copies the text of the
// element its data-copy attribute names, and says so in the page's status line (read out
// by screen readers). The buttons stay hidden without JavaScript, where they could not work.
(function () {
  var status = document.getElementById('copy-status');
  document.querySelectorAll('button[data-copy]').forEach(function (button) {
    var source = document.getElementById(button.dataset.copy);
    if (!source) return;
    button.hidden = false;
    button.addEventListener('click', function () {
      var text = source.textContent.trim();
      var copied = function () { status.textContent = 'Copied to the clipboard.'; };
      // Outside a secure context there is no clipboard API: select the text for Ctrl+C instead.
      var select = function () {
        var range = document.createRange();
        range.selectNodeContents(source);
        var selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        status.textContent = 'Selected: press Ctrl+C (or ⌘+C) to copy.';
      };
      if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(copied, select);
      else select();
    });
  });
})();
