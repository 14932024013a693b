/* Description: a helper of the containers test, standing in for a container engine's CDI
 * support: reads a CDI spec with jansson and prints one device's edits as shell lines,
 *   mount HOST CONTAINER ro|rw      (a bind mount)
 *   env NAME=VALUE
 * so that the test can apply them with unshare as an engine would.
 *   usage: k8s_cdi_edits SPEC KIND=NAME      exit 0, or 1 with the reason (no such device) */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
  if (argc != 3 || !strchr(argv[2], '=')) {
    fprintf(stderr, "usage: k8s_cdi_edits SPEC KIND=NAME\n");
    return 1;
  }
  json_error_t error;
  json_t *spec = json_load_file(argv[1], 0, &error);
  if (!spec) {
    fprintf(stderr, "k8s_cdi_edits: %s: %s (line %d)\n", argv[1], error.text, error.line);
    return 1;
  }
  const char *eq = strchr(argv[2], '='), *kind = json_string_value(json_object_get(spec, "kind"));
  if (!kind || strncmp(argv[2], kind, (size_t)(eq - argv[2])) != 0 || kind[eq - argv[2]]) {
    fprintf(stderr, "k8s_cdi_edits: %s is of kind %s, not %.*s\n", argv[1], kind ? kind : "(none)",
            (int)(eq - argv[2]), argv[2]);
    return 1;
  }
  size_t i, j;
  json_t *d, *item;
  json_array_foreach(json_object_get(spec, "devices"), i, d) {
    if (strcmp(json_string_value(json_object_get(d, "name")), eq + 1) != 0) continue;
    json_t *edits = json_object_get(d, "containerEdits");
    json_array_foreach(json_object_get(edits, "mounts"), j, item)
      printf("mount %s %s %s\n", json_string_value(json_object_get(item, "hostPath")),
             json_string_value(json_object_get(item, "containerPath")),
             json_string_value(json_array_get(json_object_get(item, "options"), 0)));
    json_array_foreach(json_object_get(edits, "env"), j, item)
      printf("env %s\n", json_string_value(item));
    json_decref(spec);
    return 0;
  }
  fprintf(stderr, "k8s_cdi_edits: %s has no device %s\n", argv[1], argv[2]);
  return 1;
}
