from __future__ import annotations

import pytest

from signal_pipeline.bearing import SKF_6205, BearingGeometry, parse_bearing


def test_skf_6205_orders_match_published_values() -> None:
    # Published orders for the SKF 6205 (9 balls, d = 7.94 mm, D = 39.04 mm, 0°).
    assert SKF_6205.bpfo_order == pytest.approx(3.585, abs=1e-3)
    assert SKF_6205.bpfi_order == pytest.approx(5.415, abs=1e-3)
    assert SKF_6205.bsf_order == pytest.approx(2.357, abs=1e-3)
    assert SKF_6205.ftf_order == pytest.approx(0.398, abs=1e-3)


def test_defect_frequencies_scale_with_shaft_speed() -> None:
    freqs = SKF_6205.defect_frequencies(30.0)

    assert freqs.bpfo_hz == pytest.approx(30.0 * SKF_6205.bpfo_order)
    assert freqs.ball_strike_hz == pytest.approx(2 * 30.0 * SKF_6205.bsf_order)
    # BPFO + BPFI = n_balls × shaft frequency for any geometry.
    assert freqs.bpfo_hz + freqs.bpfi_hz == pytest.approx(9 * 30.0)


def test_contact_angle_moves_bpfo_towards_half_the_balls() -> None:
    angled = BearingGeometry("angled", 9, 7.94, 39.04, contact_angle_deg=40.0)

    assert SKF_6205.bpfo_order < angled.bpfo_order < 4.5


def test_parse_bearing_accepts_designation_and_custom_geometry() -> None:
    assert parse_bearing("SKF 6205") is SKF_6205
    custom = parse_bearing("8,7.5,40,15")
    assert (custom.n_balls, custom.contact_angle_deg) == (8, 15.0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("6305", "unknown bearing '6305'"),
        ("9,x,39", "must be numbers"),
        ("9,7", "n_balls,ball_mm,pitch_mm"),
        ("9,40,39", "smaller than pitch_diameter_mm"),
    ],
)
def test_parse_bearing_rejects_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_bearing(spec)
