"""Labs: their state, making and removing them, their own php-fpm, nginx, Apache and
MariaDB servers, and their memory while loaded."""
