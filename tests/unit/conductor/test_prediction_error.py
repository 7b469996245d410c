"""The one definition of the prediction error (docs/audit.md, "Prediction error"):
error = actual - predicted, bias its mean, relative error |error| / actual.

Numbers are binary fractions, so every assertion is exact.
"""

from __future__ import annotations

from sqlalchemy import column

from mooncake_core.prediction_error import (
    ErrorSummary,
    ErrorTally,
    relative_error,
    signed_error,
    summarize,
)


def test_signed_error_is_actual_minus_predicted() -> None:
    assert signed_error(predicted=0.25, actual=0.5) == 0.25  # slower than predicted: +
    assert signed_error(predicted=1.0, actual=0.5) == -0.5  # faster than predicted: -
    assert signed_error(predicted=0.5, actual=0.5) == 0.0


def test_signed_error_on_sql_columns_is_the_same_expression() -> None:
    # The audit queries aggregate this very function in SQL.
    assert str(signed_error(column("predicted"), column("actual"))) == "actual - predicted"


def test_relative_error() -> None:
    assert relative_error(predicted=0.25, actual=0.5) == 0.5
    assert relative_error(predicted=1.0, actual=0.5) == 1.0  # |error|: no sign
    assert relative_error(predicted=0.5, actual=0.0) is None  # undefined
    assert relative_error(predicted=0.5, actual=-1.0) is None


def test_summary_of_pairs() -> None:
    s = summarize([(0.25, 0.5), (1.0, 0.5)])
    # errors +0.25 and -0.5: bias -0.125, MAE 0.375; relative 0.5 and 1.0.
    assert s == ErrorSummary(count=2, mae_s=0.375, mre=0.75, bias_s=-0.125)
    under = summarize([(0.25, 0.5), (0.5, 0.75)])
    assert under.bias_s == 0.25 and under.mae_s == 0.25  # under-predicted: positive bias


def test_summary_skips_unmeasured_and_keeps_zero_actuals_out_of_mre() -> None:
    s = summarize([(0.25, None), (None, 0.5), (0.25, 0.5), (0.5, 0.0)])
    assert s == ErrorSummary(count=2, mae_s=0.375, mre=0.5, bias_s=-0.125)
    assert summarize([]) == ErrorSummary(count=0, mae_s=None, mre=None, bias_s=None)


def test_tally_is_running_summary() -> None:
    t = ErrorTally()
    assert t.summary() == ErrorSummary(0, None, None, None)
    t.add(0.25, 0.5)
    assert t.summary() == ErrorSummary(count=1, mae_s=0.25, mre=0.5, bias_s=0.25)
    t.add(1.0, 0.5)
    assert t.summary() == summarize([(0.25, 0.5), (1.0, 0.5)])
