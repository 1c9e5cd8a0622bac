"""transition: the lead removes this file once tests/test_cli.py imports make_report and make_row
from store_helpers. The store's tests are tests/test_store_*.py and tests/test_publish.py."""

from store_helpers import make_report, make_row

__all__ = ["make_report", "make_row"]
