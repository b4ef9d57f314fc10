"""service/: the behaviour of LMSP, without HTTP."""
