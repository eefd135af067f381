import sys

from albertlm.cli.main import main

sys.exit(main())
