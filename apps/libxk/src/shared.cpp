// libxk.so is made of whole archives (xk_api and every component library);
// CMake wants a target to have a source of its own, and this is it.
