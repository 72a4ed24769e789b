#pragma once
// The calls libxk_preload.so puts in front of libc's: the only symbols it
// exports (everything else, xk included, is hidden inside it).
#define XK_EXPORT extern "C" __attribute__((visibility("default")))
