# Puts this checkout first on sys.path so the suite tests the tree it lives in.
