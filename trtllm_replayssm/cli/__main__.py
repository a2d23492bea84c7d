"""`python -m trtllm_replayssm.cli`: the `trtllm-replayssm` command."""

import sys

from trtllm_replayssm.cli import main

sys.exit(main())
