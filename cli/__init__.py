"""The `moesim` command line: a leaf over the core that nothing else imports."""
