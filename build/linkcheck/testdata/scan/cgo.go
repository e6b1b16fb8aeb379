package scan

/*
#cgo darwin CFLAGS: -x objective-c
#include <stdlib.h>
bool fromPreamble(void *err) { return err != NULL; }
static int hiddenInPreamble(void) { return 0; }
@implementation PreambleClass
@end
*/
import "C"

//export goCallback
func goCallback() {}

// export notExported: not a cgo directive (space after //).
func other() {}
