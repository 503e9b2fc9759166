"""What a build report shows of its URLs: no query values, no password (`builders.uri_redaction`)."""

from __future__ import annotations

from tailpilot.builders.uri_redaction import displayed, redacted


def test_a_url_without_secrets_is_shown_as_written() -> None:
    plain = "https://models.example.com/team/model.onnx"
    assert displayed(plain) == plain
    assert (
        redacted(f"cannot download {plain}: timed out", [plain, None])
        == f"cannot download {plain}: timed out"
    )


def test_the_query_and_the_password_are_replaced_wherever_they_appear() -> None:
    uri = "https://bob:hunter2secret@store.example.com:8443/b/m.onnx?sig=abcdef123456&v=1&se=2026-12-08"
    assert displayed(uri) == "https://bob:REDACTED@store.example.com:8443/b/m.onnx?REDACTED"
    # An HTTP client quoting the request in its own words, the values percent-encoded or not.
    text = f"model {uri}: Client error for url 'https://store.example.com:8443/b/m.onnx?sig=abcdef123456&v=1'"
    text += " (signature abcdef123456, date 2026-12-08, password hunter2secret)"
    shown = redacted(text, [uri])
    for secret in ("abcdef123456", "hunter2secret", "2026-12-08"):
        assert secret not in shown, shown
    assert "https://bob:REDACTED@store.example.com:8443/b/m.onnx?REDACTED" in shown
    # A short value ("1") is not hunted through the text: it would redact every digit ("8443" too).
    assert "v=1'" in shown and "8443" in shown


def test_encoded_forms_of_a_value_are_removed_too() -> None:
    uri = "https://h.example/m.onnx?X-Amz-Security-Token=a%2Fb%2Bc%3D%3Dlong+token"
    # Decoded ("+" in a query is a space), percent-encoded, and form-encoded.
    for form in ("a/b+c==long token", "a%2Fb%2Bc%3D%3Dlong%20token", "a%2Fb%2Bc%3D%3Dlong+token"):
        assert form not in redacted(f"failed: {form}", [uri])
