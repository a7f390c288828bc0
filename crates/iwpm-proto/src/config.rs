//! iwpmd.conf parser (in progress).
