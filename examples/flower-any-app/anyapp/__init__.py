"""A Flower app written the way Flower's quickstart writes one, with fedselect choosing its nodes."""
