// Description: a program whose CUDA runtime is linked statically (nvcc's default). With cudaw
// preloaded, cudaw cannot see its calls and must say so once (checked by the test's regex).
#include <cstdio>
__global__ void k() {}
int main() { printf("static program ran\n"); return 0; }
