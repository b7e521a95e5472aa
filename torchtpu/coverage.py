"""python -m torchtpu.coverage: the OpInfo, ModuleInfo, error-input and
Hugging Face sweeps' command. The sweeps live in the tools package,
torchtpu_tools (`import torchtpu` loads none of it); this module only
forwards to its command line."""
import sys

from torchtpu_tools.coverage import main

if __name__ == "__main__":
    sys.exit(main())
