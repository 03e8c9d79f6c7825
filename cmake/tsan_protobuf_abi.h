// Force-included into every C++ file of a ThreadSanitizer build
// (cmake/JagrankSanitizer.cmake). protobuf 3.21's map_field.h gives
// MapFieldBase two more members when __SANITIZE_THREAD__ is defined, but
// Debian's libprotobuf is built without TSan: code compiled with the macro
// would lay out every map field (RankRequest.sparse_features) differently
// from the library that destroys it, and the arena's cleanup crashes. The
// header is read once here with the macro hidden, so both sides agree; the
// macro is back for every line after it.
#ifndef JAGRANK_CMAKE_TSAN_PROTOBUF_ABI_H_
#define JAGRANK_CMAKE_TSAN_PROTOBUF_ABI_H_
#pragma push_macro("__SANITIZE_THREAD__")
#undef __SANITIZE_THREAD__
#include <google/protobuf/map_field.h>
#pragma pop_macro("__SANITIZE_THREAD__")
#endif  // JAGRANK_CMAKE_TSAN_PROTOBUF_ABI_H_
