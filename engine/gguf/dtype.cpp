#include "gguf/dtype.h"
