from fakeplugin.cli import main

raise SystemExit(main())
