// The translation unit that builds the tests' precompiled header (GoogleTest and the
// standard library); every test binary reuses it.
