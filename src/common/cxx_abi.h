// Which C++ ABI (_GLIBCXX_USE_CXX11_ABI) a libc10 was built with, told by
// one of its symbols: c10::Device::str() returns a std::string, so its
// mangled name carries the [abi:cxx11] tag exactly under the new ABI (PyPI's
// x86-64 wheels up to torch 2.6 were built without it). cmake/torch.cmake
// reads these two lines for the plugin's build; the doctor checks a torch
// with them.
#pragma once

#define FSDPSKIP_CXX11_ABI_SYMBOL "_ZNK3c106Device3strB5cxx11Ev"
#define FSDPSKIP_PRE_CXX11_ABI_SYMBOL "_ZNK3c106Device3strEv"
