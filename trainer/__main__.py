import sys

from trainer.commands.main import main

sys.exit(main())
