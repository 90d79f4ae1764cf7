from __future__ import annotations

import sys

from queue_admin.cli import main

sys.exit(main())
