from fitplan.cli import main

raise SystemExit(main())
