"""server/: the jupyter-server extension and its thin Tornado handlers."""
