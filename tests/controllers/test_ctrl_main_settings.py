"""`tailpilot operator`'s one settings path: environment and flags -> `parse_args` -> `build_settings`.

The chart's side (every variable the rendered Deployment sets is read here) is
tests/chart/test_chart.py; these are the operator's own rules.
"""

from __future__ import annotations

import pytest

from tailpilot.controllers.process.main import DEFAULT_BUILDER_IMAGE, build_settings, parse_args


def test_no_environment_gives_the_built_in_defaults() -> None:
    args = parse_args([], environ={})
    settings = build_settings(args)
    assert settings.manifests.builder_image == DEFAULT_BUILDER_IMAGE
    assert dict(settings.manifests.monitoring_labels) == {}
    assert settings.prometheus_url is None
    assert args.webhook_port == 0 and args.metrics_port == 0


def test_environment_feeds_the_manifest_settings_and_flags_win() -> None:
    environ = {
        "TAILPILOT_BUILDER_IMAGE": "env/builder:1",
        "TAILPILOT_TRITON_IMAGE": "env/triton:1",
        "TAILPILOT_ENGINE_STORE_CLAIM": "env-claim",
        "TAILPILOT_MONITORING_LABELS": '{"release": "prom", "team": "ml"}',
        "TAILPILOT_CONTROL_PERIOD_SECONDS": "7",
    }
    from_env = build_settings(parse_args([], environ=environ))
    assert from_env.manifests.builder_image == "env/builder:1"
    assert from_env.manifests.triton_image == "env/triton:1"
    assert from_env.manifests.engine_store_claim == "env-claim"
    assert dict(from_env.manifests.monitoring_labels) == {"release": "prom", "team": "ml"}
    assert from_env.control_period_seconds == 7.0

    flags = ["--builder-image", "flag/builder:2", "--engine-store-claim", "flag-claim"]
    flags += ["--monitoring-label", "team=infra", "--monitoring-label", "tier=gold"]
    both = build_settings(parse_args(flags, environ=environ))
    assert both.manifests.builder_image == "flag/builder:2"
    assert both.manifests.triton_image == "env/triton:1"
    assert both.manifests.engine_store_claim == "flag-claim"
    assert dict(both.manifests.monitoring_labels) == {"release": "prom", "team": "infra", "tier": "gold"}


@pytest.mark.parametrize(
    ("argv", "environ", "complaint"),
    [
        # The webhook never serves without a token: refuse to start rather than silently not serve it.
        (["--webhook-port", "8081"], {}, "--webhook-port needs"),
        ([], {"TAILPILOT_WEBHOOK_PORT": "8081"}, "--webhook-port needs"),
        (["--webhook-port", "8081", "--webhook-token-secret", "ns/name"], {}, "NAMESPACE/NAME/KEY"),
        ([], {"TAILPILOT_WEBHOOK_TOKEN_SECRET": "ns//token"}, "NAMESPACE/NAME/KEY"),
        ([], {"TAILPILOT_MONITORING_LABELS": '["release"]'}, "TAILPILOT_MONITORING_LABELS"),
        ([], {"TAILPILOT_MONITORING_LABELS": "release=prom"}, "TAILPILOT_MONITORING_LABELS"),
        (["--monitoring-label", "release"], {}, "--monitoring-label takes KEY=VALUE"),
    ],
)
def test_misconfiguration_stops_the_operator_at_start(
    argv: list[str], environ: dict[str, str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        build_settings(parse_args(argv, environ=environ))
    message = capsys.readouterr().err + str(exc.value)
    assert complaint in message, message


def test_a_token_secret_enables_the_webhook() -> None:
    environ = {"TAILPILOT_WEBHOOK_PORT": "8081", "TAILPILOT_WEBHOOK_TOKEN_SECRET": "tp-system/tok/token"}
    args = parse_args([], environ=environ)
    assert args.webhook_port == 8081
    assert args.webhook_token_secret == "tp-system/tok/token"
