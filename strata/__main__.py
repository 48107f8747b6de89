"""`python -m strata`: the `strata` command (how the app and the setup bench start it outside the packaged app)."""

import sys

from strata.standard_streams import output_as_utf8

output_as_utf8((sys.stdout, sys.stderr))   # before strata.cli's imports: a traceback of one in UTF-8 on a pipe

from strata.cli import main  # noqa: E402

raise SystemExit(main())
