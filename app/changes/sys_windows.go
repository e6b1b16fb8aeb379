package changes

// noFollow is 0: os.Root refuses to follow a symlink out of the root on
// Windows too, and Airlock checks the type with Lstat first.
const noFollow = 0
