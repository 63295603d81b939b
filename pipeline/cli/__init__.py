"""The command line: the parser and dispatch in ``main``, and each command as the user sees it,
with what it prints and its exit codes. The work itself is done in the packages below this one."""
