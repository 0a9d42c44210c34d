// The translation unit that builds the tests' precompiled header (tests/CMakeLists.txt); no code.
