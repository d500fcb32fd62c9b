import sys

from privzv.cli import main

sys.exit(main())
