"""ragkit.metrics.child: a kept label child counts into the same family as `labels()` does."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from ragkit.metrics import child


def test_a_kept_child_is_the_familys_own_and_counts_where_labels_does() -> None:
    registry = CollectorRegistry()
    family = Counter(
        "kept_total", "A family for this test.", ["route", "status"], registry=registry
    )
    kept = child(family, "/v1/ask", "429")
    assert kept is child(family, "/v1/ask", "429")  # read once, kept
    assert kept is family.labels("/v1/ask", "429")  # the same child prometheus_client holds
    kept.inc()
    family.labels("/v1/ask", "429").inc()
    assert registry.get_sample_value("kept_total", {"route": "/v1/ask", "status": "429"}) == 2
    assert child(family, "/v1/ask", "200") is not kept
