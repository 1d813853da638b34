"""``python -m agenthost_protocol.cli``: the ``agenthost-protocol`` command."""

import sys

from . import main

sys.exit(main())
