"""python -m torchtpu_tools.fuzz (also python -m torchtpu.fuzz)."""
import sys

from .drive import main

sys.exit(main())
