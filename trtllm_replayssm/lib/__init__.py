"""Holds the kernel library (libreplayssm*.so) that the install builds; nothing else."""
