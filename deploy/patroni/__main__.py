"""`python -m deploy.patroni {start|stop|status|switchover|kill-leader} [DIR]`: see cluster.py."""

import signal
import sys

from .cluster import main

# `cluster.sh status | head`: end quietly when the reader goes away, as other shell tools do.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
sys.exit(main())
