//! Decoding.
