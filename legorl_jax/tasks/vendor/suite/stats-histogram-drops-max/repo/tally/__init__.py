"""Descriptive statistics: running moments, quantiles, histograms and summaries."""

from tally.histogram import Histogram, histogram
from tally.quantiles import iqr, median, quantile
from tally.running import RunningStats
from tally.summary import Summary, describe

__all__ = ["Histogram", "RunningStats", "Summary", "describe", "histogram", "iqr", "median", "quantile"]
__version__ = "0.6.0"
