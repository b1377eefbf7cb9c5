//! Capture files.
