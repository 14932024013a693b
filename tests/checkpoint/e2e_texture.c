/* Description: regression for texture objects under CUDAW_VMEM=translate (issue 10): a texture
 * over pitched (cudaMallocPitch) or linear device memory names a virtual pointer inside its
 * resource descriptor, which the device must receive translated (the emulated device, like the
 * driver, refuses memory it does not own), and which must read back as the program's own
 * pointer. Surfaces over arrays pass through. Across a checkpoint: under remap the texture keeps
 * reading the same bytes; under translate the checkpoint is refused with a reason naming the
 * texture while one is alive, and allowed again once it is destroyed. The same for a texture made
 * through the driver (cuTexObjectCreate, as a static runtime makes them), from the entry point
 * cudaGetDriverEntryPointByVersion hands out (cudaw's). Run under both policies. */
#include "e2e_common.h"

#include <cuda.h>

#define WIDTH 100  /* floats per row */
#define HEIGHT 37

typedef const void *(*texture_address_fn)(cudaTextureObject_t);

static int translate_policy(void)
{
  const char *policy = getenv("CUDAW_VMEM");
  return policy && strcmp(policy, "translate") == 0;
}

/* What the device reads through tex (emulated device memory is host memory) equals rows. */
static void check_reads(cudaTextureObject_t tex, size_t pitch, const float *rows, const char *when)
{
  texture_address_fn address = (texture_address_fn)e2e_emu_symbol("cudaw_emu_texture_address");
  const char *device = address(tex);
  CHECK(device != NULL, "%s: the device has no address for texture %#llx", when,
        (unsigned long long)tex);
  for (int y = 0; y < HEIGHT; y++)
    CHECK(memcmp(device + (size_t)y * pitch, rows + (size_t)y * WIDTH, WIDTH * sizeof(float)) == 0,
          "%s: row %d read through the texture differs", when, y);
}

static cudaTextureObject_t pitched_texture(void *ptr, size_t pitch)
{
  struct cudaResourceDesc res = {.resType = cudaResourceTypePitch2D};
  res.res.pitch2D.devPtr = ptr;
  res.res.pitch2D.desc = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  res.res.pitch2D.width = WIDTH;
  res.res.pitch2D.height = HEIGHT;
  res.res.pitch2D.pitchInBytes = pitch;
  struct cudaTextureDesc tex_desc = {.readMode = cudaReadModeElementType};
  cudaTextureObject_t tex = 0;
  CUDA_OK(cudaCreateTextureObject(&tex, &res, &tex_desc, NULL));
  struct cudaResourceDesc back;
  CUDA_OK(cudaGetTextureObjectResourceDesc(&back, tex));
  CHECK(back.resType == cudaResourceTypePitch2D && back.res.pitch2D.devPtr == ptr,
        "resource read back names %p, the program gave %p", back.res.pitch2D.devPtr, ptr);
  return tex;
}

/* cuTexObjectCreate and friends, from the runtime's driver entry point (cudaw's wrappers). */
static struct {
  CUresult (*create)(CUtexObject *, const CUDA_RESOURCE_DESC *, const CUDA_TEXTURE_DESC *,
                     const CUDA_RESOURCE_VIEW_DESC *);
  CUresult (*destroy)(CUtexObject);
  CUresult (*resource)(CUDA_RESOURCE_DESC *, CUtexObject);
} drv;

static void driver_entry(const char *name, void *slot)
{
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  CUDA_OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  CHECK(fn != NULL && found == cudaDriverEntryPointSuccess, "no driver entry point %s", name);
  memcpy(slot, &fn, sizeof fn);
}

static CUtexObject driver_pitched_texture(void *ptr, size_t pitch)
{
  CUDA_RESOURCE_DESC res = {.resType = CU_RESOURCE_TYPE_PITCH2D};
  res.res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)ptr;
  res.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
  res.res.pitch2D.numChannels = 1;
  res.res.pitch2D.width = WIDTH;
  res.res.pitch2D.height = HEIGHT;
  res.res.pitch2D.pitchInBytes = pitch;
  CUDA_TEXTURE_DESC tex_desc = {0};
  CUtexObject tex = 0;
  CHECK(drv.create(&tex, &res, &tex_desc, NULL) == CUDA_SUCCESS, "cuTexObjectCreate failed");
  CUDA_RESOURCE_DESC back;
  CHECK(drv.resource(&back, tex) == CUDA_SUCCESS);
  CHECK(back.resType == CU_RESOURCE_TYPE_PITCH2D &&
            back.res.pitch2D.devPtr == (CUdeviceptr)(uintptr_t)ptr,
        "driver resource read back names %#llx, the program gave %p",
        (unsigned long long)back.res.pitch2D.devPtr, ptr);
  return tex;
}

static void linear_textures(void)
{
  void *buffer;
  CUDA_OK(cudaMalloc(&buffer, 4096));
  struct cudaResourceDesc res = {.resType = cudaResourceTypeLinear};
  res.res.linear.devPtr = buffer;
  res.res.linear.desc = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindUnsigned);
  res.res.linear.sizeInBytes = 4096;
  struct cudaTextureDesc tex_desc = {.readMode = cudaReadModeElementType};
  cudaTextureObject_t tex = 0;
  CUDA_OK(cudaCreateTextureObject(&tex, &res, &tex_desc, NULL));
  struct cudaResourceDesc back;
  CUDA_OK(cudaGetTextureObjectResourceDesc(&back, tex));
  CHECK(back.res.linear.devPtr == buffer, "linear resource reads back %p, not %p",
        back.res.linear.devPtr, buffer);
  CUDA_OK(cudaDestroyTextureObject(tex));
  /* Past the allocation's end: refused, not handed to the device. */
  res.res.linear.sizeInBytes = 8192;
  cudaError_t e = cudaCreateTextureObject(&tex, &res, &tex_desc, NULL);
  CHECK(e == cudaErrorInvalidValue, "texture past the allocation: %s", cudaGetErrorName(e));
  (void)cudaGetLastError();
  CUDA_OK(cudaFree(buffer));
}

static void surface_over_array(void)
{
  struct cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array;
  CUDA_OK(cudaMallocArray(&array, &f, 64, 64, cudaArraySurfaceLoadStore));
  struct cudaResourceDesc res = {.resType = cudaResourceTypeArray};
  res.res.array.array = array;
  cudaSurfaceObject_t surface = 0;
  CUDA_OK(cudaCreateSurfaceObject(&surface, &res));
  struct cudaResourceDesc back;
  CUDA_OK(cudaGetSurfaceObjectResourceDesc(&back, surface));
  CHECK(back.res.array.array == array);
  CUDA_OK(cudaDestroySurfaceObject(surface));
  CUDA_OK(cudaFreeArray(array));
}

int main(int argc, char **argv)
{
  (void)argc;
  (void)argv;
  float *rows = malloc(sizeof(float) * WIDTH * HEIGHT);
  CHECK(rows != NULL);
  for (int i = 0; i < WIDTH * HEIGHT; i++) rows[i] = (float)i * 0.5f;
  void *image;
  size_t pitch;
  CUDA_OK(cudaMallocPitch(&image, &pitch, WIDTH * sizeof(float), HEIGHT));
  CUDA_OK(cudaMemcpy2D(image, pitch, rows, WIDTH * sizeof(float), WIDTH * sizeof(float), HEIGHT,
                       cudaMemcpyHostToDevice));
  cudaTextureObject_t tex = pitched_texture(image, pitch);
  check_reads(tex, pitch, rows, "after creation");
  driver_entry("cuTexObjectCreate", &drv.create);
  driver_entry("cuTexObjectDestroy", &drv.destroy);
  driver_entry("cuTexObjectGetResourceDesc", &drv.resource);
  CUtexObject driver_tex = driver_pitched_texture(image, pitch);
  check_reads((cudaTextureObject_t)driver_tex, pitch, rows, "driver texture, after creation");
  linear_textures();
  surface_over_array();

  char reply[4096];
  e2e_ask("checkpoint", reply, sizeof reply);
  if (translate_policy()) {
    CHECK(!e2e_reply_ok(reply) && e2e_reply_state(reply, "running") && strstr(reply, "texture") &&
              strstr(reply, "\"error\":\"failed\""),
          "checkpoint with a live texture under translate: %s", reply);
    check_reads(tex, pitch, rows, "after the refused checkpoint");
    CUDA_OK(cudaDestroyTextureObject(tex));
    e2e_ask("checkpoint", reply, sizeof reply); /* the driver's texture still lives */
    CHECK(!e2e_reply_ok(reply) && e2e_reply_state(reply, "running") && strstr(reply, "texture"),
          "checkpoint with a live driver texture under translate: %s", reply);
    CHECK(drv.destroy(driver_tex) == CUDA_SUCCESS);
    e2e_ask("checkpoint", reply, sizeof reply);
  }
  CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "paused"), "checkpoint: %s", reply);
  e2e_ask("resume", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "running"), "resume: %s", reply);
  if (translate_policy()) { /* made again after the resume */
    tex = pitched_texture(image, pitch);
    driver_tex = driver_pitched_texture(image, pitch);
  }
  check_reads(tex, pitch, rows, "after the resume");
  check_reads((cudaTextureObject_t)driver_tex, pitch, rows, "driver texture, after the resume");
  CUDA_OK(cudaDestroyTextureObject(tex));
  CHECK(drv.destroy(driver_tex) == CUDA_SUCCESS);
  CUDA_OK(cudaFree(image));
  free(rows);
  printf("texture: pitched (runtime and driver), linear and surface objects %s; ok\n",
         translate_policy() ? "translated, checkpoint refused while one lived" :
                              "kept across a checkpoint");
  return 0;
}
