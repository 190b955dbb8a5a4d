// Passkeys (SPEC §4.12), with @simplewebauthn/browser (/static/simplewebauthn-browser.js,
// served from its package): on the login page, **Log in with a passkey** and the browser's
// autofill (conditional mediation: the username field offers the passkeys of this site); on
// the second step after a password, **Use a passkey**; on /account/security, **Add a passkey**. The server's endpoints take forms (with the page's
// CSRF token) and answer JSON; a refusal's `error_description` is shown as it is.
(function () {
  var lib = window.SimpleWebAuthnBrowser;
  var supported = !!(lib && lib.browserSupportsWebAuthn());

  function post(url, fields) {
    return fetch(url, {
      method: 'POST',
      body: new URLSearchParams(fields),
      credentials: 'same-origin',
      headers: { Accept: 'application/json' },
    }).then(function (response) {
      return response
        .json()
        .catch(function () {
          return {};
        })
        .then(function (json) {
          return { ok: response.ok, json: json };
        });
    });
  }

  function refused(result, fallback) {
    var error = new Error((result.json && result.json.error_description) || fallback);
    error.name = 'Refused';
    return error;
  }

  function quiet() {
    var error = new Error('autofill unavailable');
    error.name = 'AbortError';
    return error;
  }

  /** A sentence for a person, whatever went wrong. */
  function explain(error, what) {
    if (error && error.name === 'Refused') return error.message;
    if (error && error.name === 'NotAllowedError')
      return 'The passkey request was canceled or timed out. Try again' + (what === 'login' ? ', or log in with your password.' : '.');
    if (error && error.name === 'InvalidStateError') return 'This device already holds a passkey for your account.';
    if (error && error.name === 'SecurityError') return 'This browser refused passkeys for this site.';
    return 'Something went wrong with the passkey. Try again' + (what === 'login' ? ', or log in with your password.' : '.');
  }

  function show(element, text) {
    element.textContent = text;
    element.hidden = false;
  }

  /** Leaving the page after a passkey login is not canceling it (popup.js). */
  function leave(url) {
    document.dispatchEvent(new Event('gatehouse:leaving'));
    window.location.assign(url);
  }

  var loginForm = document.getElementById('login-form');
  if (loginForm && loginForm.dataset.passkeys && supported) {
    var endpoint = loginForm.dataset.passkeys;
    var section = document.getElementById('passkey-login');
    var button = document.getElementById('passkey-button');
    var loginError = document.getElementById('passkey-error');
    var csrf = loginForm.elements._csrf.value;
    var next = loginForm.elements.next.value;
    section.hidden = false;

    var logIn = function (autofill) {
      return post(endpoint + '/options', { _csrf: csrf })
        .then(function (result) {
          if (result.ok) return lib.startAuthentication({ optionsJSON: result.json, useBrowserAutofill: autofill });
          // Autofill is a convenience waiting in the background: when it cannot start, the
          // button and the password remain, and nothing needs saying.
          if (autofill) throw quiet();
          throw refused(result, 'Passkeys are not available right now. Log in with your password.');
        })
        .then(function (response) {
          return post(endpoint, { _csrf: csrf, next: next, response: JSON.stringify(response) });
        })
        .then(function (result) {
          if (!result.ok) throw refused(result, 'This passkey was not accepted. Try again, or log in with your password.');
          leave(result.json.redirect);
        });
    };

    button.addEventListener('click', function () {
      loginError.hidden = true;
      button.disabled = true;
      button.setAttribute('aria-busy', 'true');
      logIn(false).catch(function (error) {
        button.disabled = false;
        button.removeAttribute('aria-busy');
        show(loginError, explain(error, 'login'));
        startAutofill();
      });
    });

    // Autofill waits in the background until the person picks a passkey in the username
    // field's suggestions; the button's request aborts it (the library allows one at a time).
    var startAutofill = function () {
      lib.browserSupportsWebAuthnAutofill().then(function (available) {
        if (!available) return;
        logIn(true).catch(function (error) {
          if (error && error.name === 'AbortError') return; // the button took over, or autofill could not start
          show(loginError, explain(error, 'login'));
        });
      });
    };
    startAutofill();
  }

  // The second step after a password (or step-up): one of this person's passkeys.
  var stepSection = document.getElementById('passkey-step');
  if (stepSection) {
    var stepButton = document.getElementById('passkey-button');
    var stepError = document.getElementById('passkey-error');
    var stepEndpoint = stepSection.dataset.passkeys;
    if (!supported) {
      show(stepError, 'This browser cannot use passkeys.' + (document.getElementById('code') ? ' Enter a code instead.' : ''));
      stepButton.disabled = true;
    }
    stepButton.addEventListener('click', function () {
      var fields = { _csrf: stepSection.dataset.csrf };
      stepError.hidden = true;
      stepButton.disabled = true;
      stepButton.setAttribute('aria-busy', 'true');
      post(stepEndpoint + '/options', fields)
        .then(function (result) {
          if (!result.ok) throw refused(result, 'Passkeys are not available right now.');
          return lib.startAuthentication({ optionsJSON: result.json });
        })
        .then(function (response) {
          return post(stepEndpoint, { _csrf: fields._csrf, next: stepSection.dataset.next, response: JSON.stringify(response) });
        })
        .then(function (result) {
          if (!result.ok) throw refused(result, 'This passkey was not accepted.');
          leave(result.json.redirect);
        })
        .catch(function (error) {
          stepButton.disabled = false;
          stepButton.removeAttribute('aria-busy');
          show(stepError, explain(error, 'step'));
        });
    });
  }

  var addForm = document.getElementById('add-passkey');
  if (addForm) {
    var addError = document.getElementById('passkey-error');
    var addButton = addForm.querySelector('button[type=submit]');
    addForm.addEventListener('submit', function (event) {
      event.preventDefault();
      addError.hidden = true;
      if (!supported) {
        show(addError, 'This browser cannot make passkeys. Use an up-to-date browser, or add the passkey from another device.');
        return;
      }
      var fields = { _csrf: addForm.elements._csrf.value };
      var name = addForm.elements.name.value;
      addButton.disabled = true;
      addButton.setAttribute('aria-busy', 'true');
      post(addForm.dataset.options, fields)
        .then(function (result) {
          if (!result.ok) throw refused(result, 'A passkey cannot be added right now.');
          return lib.startRegistration({ optionsJSON: result.json });
        })
        .then(function (response) {
          return post(addForm.action, { _csrf: fields._csrf, name: name, response: JSON.stringify(response) });
        })
        .then(function (result) {
          if (!result.ok) throw refused(result, 'The passkey was not added.');
          leave(result.json.redirect);
        })
        .catch(function (error) {
          addButton.disabled = false;
          addButton.removeAttribute('aria-busy');
          show(addError, explain(error, 'add'));
          addError.focus();
        });
    });
  }
})();
