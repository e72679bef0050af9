// acl/acl.h — the part of the ACL runtime header TileLang's generated host wrapper and
// tl_templates/ascend/common.h touch: aclError, ACL_SUCCESS, aclrtGetLastError. The twin launches
// kernels itself (dj_twin/launch.h), so these only have to compile.
#pragma once

#include <cstdint>

typedef int aclError;
typedef void* aclrtStream;
#define ACL_SUCCESS 0
#define ACL_RT_THREAD_LEVEL 0
inline aclError aclrtGetLastError(int) { return ACL_SUCCESS; }
