// OAuth 2.0 Form Post Response Mode (SPEC §4.1): the page posts the authorization response
// to the client's redirect URL at once. Without scripts, the person presses the button.
document.getElementById('form-post').submit();
