"""The trust boundary: what a submission's code may touch, built from bubblewrap and the kernel's
own limits. Nothing here reads a notebook."""
