"""The service time learned from the serving pods' counters: a line through the windows."""

from __future__ import annotations

import pytest

from tailpilot.api.autoscaling import Observation
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.policy.service_fit import (
    MAX_SAMPLES,
    FitQuality,
    ServiceSample,
    WindowKind,
    add_sample,
    disagreement,
    fit_service_time,
    request_weighted_batch,
    sample_of,
)

TRUE = ServiceTimeModel(intercept_ms=4.0, per_item_ms=1.5)
ONE_REPLICA: dict[str, int] = {"max_batch_size": 16, "instances": 1, "replicas": 1}


def window(mean_batch: float, *, model: ServiceTimeModel = TRUE, rate: float = 50.0) -> Observation:
    """A window whose batches average `mean_batch`: a request's time is its request-weighted batch's."""
    x = request_weighted_batch(mean_batch, 16)
    return Observation(
        at_s=0.0,
        request_rate=rate,
        p99_ms=20.0,
        compute_time_ms=model.intercept_ms + model.per_item_ms * x,
        mean_batch_size=mean_batch,
        ready_replicas=1,
    )


def samples_of(*mean_batches: float, model: ServiceTimeModel = TRUE) -> tuple[ServiceSample, ...]:
    samples: tuple[ServiceSample, ...] = ()
    for m in mean_batches:
        samples = add_sample(samples, sample_of(window(m, model=model), **ONE_REPLICA))
    return samples


def test_windows_at_several_batch_sizes_give_back_the_per_batch_and_per_item_costs():
    fit = fit_service_time(samples_of(1.0, 1.5, 3.0, 5.0, 8.0), max_batch_size=16)
    assert fit is not None and fit.quality is FitQuality.FITTED
    assert fit.model.intercept_ms == pytest.approx(4.0)
    assert fit.model.per_item_ms == pytest.approx(1.5)
    assert fit.samples == 5
    assert fit.batch_range[0] == pytest.approx(1.0)
    # Only compute times measured here: the compute line is the same line.
    assert fit.compute_model is not None and fit.compute_model.per_item_ms == pytest.approx(1.5)


def test_the_servers_time_outside_the_queue_is_fitted_beside_the_compute_time():
    seen = window(2.0).model_copy(update={"service_time_ms": window(2.0).compute_time_ms + 3.0})
    sample = sample_of(seen, **ONE_REPLICA)
    assert sample is not None and sample.time_ms == pytest.approx(sample.compute_ms + 3.0)


def test_one_batch_size_only_gives_a_provisional_model_that_credits_batching_with_nothing():
    fit = fit_service_time(samples_of(2.0, 2.0, 2.1, 2.0, 2.0), max_batch_size=16)
    assert fit is not None and fit.quality is FitQuality.PROVISIONAL
    assert fit.model.intercept_ms == 0.0
    x = request_weighted_batch(2.0, 16)
    # The observed time at the batch it was seen at, every item charged the same:
    assert fit.model.mean_ms(1) * x == pytest.approx(TRUE.mean_ms(1) + TRUE.per_item_ms * (x - 1), rel=0.02)
    # ...so a larger batch is predicted no cheaper per item than the true model makes it.
    assert fit.model.mean_ms(16) / 16 >= TRUE.mean_ms(16) / 16


def test_too_few_windows_are_provisional_even_when_they_spread():
    fit = fit_service_time(samples_of(1.0, 8.0), max_batch_size=16)
    assert fit is not None and fit.quality is FitQuality.PROVISIONAL


def test_an_engine_of_batch_one_is_known_once_its_windows_are_enough():
    samples: tuple[ServiceSample, ...] = ()
    for _ in range(4):
        samples = add_sample(samples, sample_of(window(1.0), max_batch_size=1, instances=1, replicas=1))
    fit = fit_service_time(samples, max_batch_size=1)
    assert fit is not None and fit.quality is FitQuality.FITTED
    assert fit.model.mean_ms(1) == pytest.approx(TRUE.mean_ms(1))


def test_idle_or_unmeasured_windows_add_nothing():
    assert sample_of(window(1.0, rate=0.2), **ONE_REPLICA) is None
    assert sample_of(Observation(at_s=0.0, request_rate=50.0, p99_ms=20.0), **ONE_REPLICA) is None
    assert fit_service_time((), max_batch_size=16) is None


def test_noise_that_makes_larger_batches_look_cheaper_charges_the_batch_not_the_items():
    cheaper = (
        ServiceSample(request_batch=1.0, time_ms=10.0, weight=1.0),
        ServiceSample(request_batch=2.0, time_ms=9.0, weight=1.0),
        ServiceSample(request_batch=3.0, time_ms=8.0, weight=1.0),
        ServiceSample(request_batch=4.0, time_ms=7.0, weight=1.0),
    )
    fit = fit_service_time(cheaper, max_batch_size=8)
    assert fit is not None
    assert (fit.model.intercept_ms, fit.model.per_item_ms) == (pytest.approx(8.5), 0.0)


def test_the_window_memory_is_bounded():
    assert len(samples_of(*([2.0] * (MAX_SAMPLES + 7)))) == MAX_SAMPLES


def test_disagreement_compares_one_batchs_time():
    fit = fit_service_time(samples_of(1.0, 1.5, 3.0, 5.0, 8.0), max_batch_size=16)
    assert fit is not None
    assert disagreement(fit, TRUE, batch=4.0) == pytest.approx(1.0)
    slow = ServiceTimeModel(intercept_ms=2.0, per_item_ms=0.75)
    assert disagreement(fit, slow, batch=4.0) == pytest.approx(2.0)


def test_saturated_windows_measure_what_a_replica_serves_and_count_first():
    # The server counts 17 ms a request, but two replicas with queues serve only 70 requests/s.
    flat_out = Observation(
        at_s=0.0,
        request_rate=70.0,
        p99_ms=900.0,
        service_time_ms=17.0,
        compute_time_ms=15.0,
        mean_batch_size=1.0,
        queue_depth_per_replica=12.0,
        ready_replicas=2,
    )
    saturated = sample_of(flat_out, max_batch_size=1, instances=1, replicas=2)
    assert saturated is not None and saturated.kind is WindowKind.SATURATED
    assert saturated.time_ms == pytest.approx(1000.0 * 2 / 70.0)
    assert saturated.compute_ms == pytest.approx(15.0)
    # The recent part of the window, all of it queued, served faster: that is the better measure.
    recent = flat_out.model_copy(update={"recent_request_rate": 100.0, "recent_window_s": 4.0})
    faster = sample_of(recent, max_batch_size=1, instances=1, replicas=2)
    assert faster is not None and faster.time_ms == pytest.approx(20.0)
    calm = flat_out.model_copy(update={"request_rate": 20.0, "queue_depth_per_replica": 0.0})
    steady = sample_of(calm, max_batch_size=1, instances=1, replicas=2)
    assert steady is not None and steady.kind is WindowKind.STEADY and steady.time_ms == 17.0
    starting = sample_of(calm, max_batch_size=1, instances=1, replicas=3)
    assert starting is not None and starting.kind is WindowKind.MIXED
    fit = fit_service_time((steady,) * 4 + (saturated,) + (starting,), max_batch_size=1)
    assert fit is not None and fit.samples == 1 and fit.windows is WindowKind.SATURATED
    assert fit.model.mean_ms(1) == pytest.approx(1000.0 * 2 / 70.0)


def test_windows_with_pods_starting_count_only_until_steady_ones_exist():
    starting = tuple(
        ServiceSample(request_batch=1.0, time_ms=40.0, weight=50.0, kind=WindowKind.MIXED) for _ in range(4)
    )
    alone = fit_service_time(starting, max_batch_size=1)
    assert alone is not None and alone.model.mean_ms(1) == pytest.approx(40.0)
    assert alone.windows is WindowKind.MIXED
    calm = tuple(ServiceSample(request_batch=1.0, time_ms=20.0, weight=50.0) for _ in range(4))
    both = fit_service_time(starting + calm, max_batch_size=1)
    assert both is not None and both.model.mean_ms(1) == pytest.approx(20.0) and both.samples == 4
    assert both.windows is WindowKind.STEADY


def test_a_window_that_saturated_only_at_its_end_does_not_set_the_capacity():
    def saturated(time_ms: float) -> ServiceSample:
        return ServiceSample(
            request_batch=1.0, time_ms=time_ms, weight=1000.0 / time_ms, kind=WindowKind.SATURATED
        )

    # The first window held the step's onset: half of it idle, so it reads twice the time.
    fit = fit_service_time((saturated(44.0), saturated(22.0), saturated(23.0)), max_batch_size=1)
    assert fit is not None and fit.samples == 2
    assert fit.model.mean_ms(1) == pytest.approx(22.5, rel=0.01)
